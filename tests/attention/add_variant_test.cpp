// Adding a variant is one class and one registry row: this file is the whole diff of adding
// "mixed_values" (a made-up variant: P_w only, with h_v free; Table 3's weights projection
// under another name). Nothing else in thx is told about it, yet the config accepts it with its
// rules, the factory builds it, the costs count it, the optimizer factors it, and a whole T5
// built with it trains one step.
#include <gtest/gtest.h>

#include "attention/costs.h"
#include "attention/factory.h"
#include "attention/projected.h"
#include "attention/registry.h"
#include "attention/attention_test_util.h"
#include "common/error.h"
#include "models/t5.h"
#include "training/pretrain.h"

namespace thx {
namespace {
namespace THX_FILE_ID {

// ---- the class: attention/mixed_values.{h,cpp} in a real addition -------------------------
class MixedValuesAttention : public ProjectedAttention {
 public:
  explicit MixedValuesAttention(const AttentionDims& d) : ProjectedAttention(d) {
    TORCH_CHECK(d.name() == "mixed_values" && d.h_k == d.h, "MixedValuesAttention: ", d.summary());
  }
};

// ---- the row: one entry of registry.cpp in a real addition ---------------------------------
VariantSpec mixed_values_row() {
  VariantSpec v;
  v.name = "mixed_values", v.paper = "a test";
  v.P_w = true;
  v.h_k_tied = "mixed_values has no P_l";
  v.params = {"P_q", "P_k", "P_v", "P_o", "P_w"};
  v.multiplies = projected_multiplies;
  v.create = [](const AttentionDims& d) -> std::shared_ptr<Attention> { return std::make_shared<MixedValuesAttention>(d); };
  return v;
}

const VariantSpec& row() {
  static const VariantSpec& r = register_variant(mixed_values_row());
  return r;
}

TEST(AddVariant, OneClassAndOneRowReachEveryPartOfThx) {
  const VariantSpec& v = row();
  EXPECT_EQ(find_variant("mixed_values"), &v);
  EXPECT_THROW(register_variant(v), InputError);  // a name is registered once
  AttentionConfig c;
  c.variant = "mixed_values", c.h = 4, c.h_v = 6;
  const AttentionDims d = resolve(c, 24, 24, 24);
  EXPECT_EQ(d.summary(), "mixed_values h_k=4 h=4 h_v=6 d_k=6 d_v=4");
  c.h_k = 2;
  try {
    resolve(c, 24, 24, 24);
    ADD_FAILURE() << "h_k accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("mixed_values has no P_l"), std::string::npos) << e.what();
  }
  auto layer = make_attention(d);
  EXPECT_NE(std::dynamic_pointer_cast<MixedValuesAttention>(layer), nullptr);
  EXPECT_GT(multiplies(d, 8, 8), multiplies(resolve(AttentionConfig{}, 24, 24, 24), 8, 8));
  EXPECT_NE(std::string(variant_choices()).find("mixed_values"), std::string::npos);
  // The tests' paper reference has none for it yet: an error, not talking-heads in its place.
  const torch::Tensor X = torch::randn({1, 3, 24}), M = torch::randn({1, 3, 24});
  EXPECT_THROW(test::reference_forward(d, X, M, test::params_of(*layer), {}, {}), std::invalid_argument);
  // It has a P_w, so optimizer.mixing_lr_multiplier's messages name it among the mixing variants.
  EXPECT_NE(mixing_variant_choices().find("mixed_values"), std::string::npos) << mixing_variant_choices();
  EXPECT_EQ(mixing_variant_choices().find("multi_head"), std::string::npos) << mixing_variant_choices();

  // A T5 with it in every layer: one optimizer step, P_w gets a gradient and is never factored.
  ModelConfig m;
  m.d_model = 24, m.d_ff = 32, m.encoder_layers = 1, m.decoder_layers = 1;
  AttentionConfig a;
  a.variant = "mixed_values", a.h = 4;
  T5 t5(m, T5Attention{a, a, a}, 40);
  auto ops = optimized_params(*t5, "mesh_tf");
  auto opt = make_optimizer(OptimizerConfig{}, ops);
  const auto ids = torch::randint(2, 40, {2, 6});
  t5->forward(ids, ids, ids).loss.backward();
  opt->step(0.01);
  const auto params = t5->named_parameters_by_path();
  const auto it = std::find_if(params.begin(), params.end(), [](const auto& p) {
    return p.first == "encoder/layers/0/self_attention/P_w";
  });
  ASSERT_NE(it, params.end());
  EXPECT_TRUE(it->second.grad().defined());
  for (const auto& o : ops)
    if (o.path.find("/P_w") != std::string::npos) EXPECT_TRUE(o.never_factor) << o.path;
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx
