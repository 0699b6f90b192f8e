#include "attention/factory.h"

#include <functional>

#include "attention/general_bilinear.h"
#include "attention/multi_head.h"
#include "attention/project_logits.h"
#include "attention/project_weights.h"
#include "attention/talking_heads.h"

namespace thx {
namespace {

template <class T>
std::shared_ptr<Attention> create(const AttentionDims& d) {
  return std::make_shared<T>(d);
}

using Creator = std::shared_ptr<Attention> (*)(const AttentionDims&);
const std::map<Variant, Creator> kRegistry = {
    {Variant::multi_head, create<MultiHeadAttention>},
    {Variant::talking_heads, create<TalkingHeadsAttention>},
    {Variant::project_logits, create<ProjectLogitsAttention>},
    {Variant::project_weights, create<ProjectWeightsAttention>},
    {Variant::general_bilinear, create<GeneralBilinearAttention>},
};

}  // namespace

std::shared_ptr<Attention> make_attention(const AttentionDims& dims) {
  return kRegistry.at(dims.variant)(dims);
}

std::shared_ptr<Attention> make_attention(const AttentionConfig& config, int64_t d_model,
                                          const std::string& path) {
  return make_attention(resolve(config, d_model, d_model, d_model, path));
}

}  // namespace thx
