#include "attention/talking_heads.h"

namespace thx {

TalkingHeadsAttention::TalkingHeadsAttention(const AttentionDims& dims) : ProjectedAttention(dims) {
  TORCH_CHECK(dims.name() == "talking_heads",
              "TalkingHeadsAttention: dims are not talking_heads: ", dims.summary());
}

}  // namespace thx
