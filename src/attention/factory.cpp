#include "attention/factory.h"

#include "attention/registry.h"

namespace thx {

std::shared_ptr<Attention> make_attention(const AttentionDims& dims) {
  TORCH_CHECK(dims.variant, "make_attention: dims are not resolved");
  return dims.variant->create(dims);
}

std::shared_ptr<Attention> make_attention(const AttentionConfig& config, int64_t d_model,
                                          const std::string& path) {
  return make_attention(resolve(config, d_model, d_model, d_model, path));
}

}  // namespace thx
