#include "attention/project_weights.h"

namespace thx {

ProjectWeightsAttention::ProjectWeightsAttention(const AttentionDims& dims)
    : ProjectedAttention(dims) {
  TORCH_CHECK(dims.name() == "project_weights" && dims.h_k == dims.h && !dims.any_dynamic(),
              "ProjectWeightsAttention: dims are not project_weights: ", dims.summary());
}

}  // namespace thx
