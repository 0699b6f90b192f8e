// run_config.h: the root of a thx YAML config. Each block is a typed struct owned by the
// module that uses it; a command reads the blocks it needs and rejects unknown keys.
#pragma once
#include "attention/config.h"
#include "common/schema.h"

namespace thx {

struct RunConfig {
  AttentionConfig attention;
};

template <class V>
void visit(V& v, RunConfig& c) {
  v("attention", c.attention, "attention of every layer (sections 3-6, Appendix A)");
}

}  // namespace thx
