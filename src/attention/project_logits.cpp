#include "attention/project_logits.h"

namespace thx {

ProjectLogitsAttention::ProjectLogitsAttention(const AttentionDims& dims)
    : ProjectedAttention(dims) {
  TORCH_CHECK(dims.name() == "project_logits" && dims.h_v == dims.h && !dims.any_dynamic(),
              "ProjectLogitsAttention: dims are not project_logits: ", dims.summary());
}

}  // namespace thx
