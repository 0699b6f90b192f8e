// factory.h: every attention variant is created here from resolved dimensions, by the
// create function of its registry row (registry.h).
#pragma once
#include <memory>

#include "attention/attention.h"

namespace thx {

std::shared_ptr<Attention> make_attention(const AttentionDims& dims);

// Validate an `attention:` block for a layer of width d_model and build it.
std::shared_ptr<Attention> make_attention(const AttentionConfig& config, int64_t d_model,
                                          const std::string& path = "attention");

}  // namespace thx
