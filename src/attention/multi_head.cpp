#include "attention/multi_head.h"

namespace thx {

MultiHeadAttention::MultiHeadAttention(const AttentionDims& dims) : ProjectedAttention(dims) {
  TORCH_CHECK(dims.name() == "multi_head" && dims.h_k == dims.h && dims.h_v == dims.h &&
                  !dims.any_dynamic(),
              "MultiHeadAttention: dims are not multi_head: ", dims.summary());
}

}  // namespace thx
