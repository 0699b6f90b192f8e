// The variant registry, row by row: every fact a row states is checked against what thx does
// with it: the layer its create() builds (type, parameter names the probe writes, P_l / P_w),
// the head-count rules and their messages, which keys exist, dynamic projections, section 5's
// multiplies counted from the built layer's parameter shapes, the optimizer's factoring view,
// BERT's dense biases, and the names --help and --dump-config offer.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "attention/attention.h"
#include "attention/costs.h"
#include "attention/factory.h"
#include "attention/registry.h"
#include "common/error.h"
#include "test_util.h"
#include "training/pretrain.h"

namespace thx {
namespace {
namespace THX_FILE_ID {

constexpr int64_t kD = 24, kH = 4;

AttentionConfig config(const VariantSpec& v) {
  AttentionConfig c;
  c.variant = v.name, c.h = kH;
  return c;
}

// The error resolve() gives, or "" if it accepts the block.
std::string error_of(const AttentionConfig& c) {
  try {
    resolve(c, kD, kD, kD);
    return "";
  } catch (const ConfigError& e) {
    return e.key + ": " + e.what();
  }
}

std::vector<std::string> names_of(const torch::nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& p : m.named_parameters()) out.push_back(p.key());
  return out;
}

class Registry : public ::testing::TestWithParam<VariantSpec> {};

}  // namespace THX_FILE_ID
}  // namespace
// gtest prints a failing parameter with this.
void PrintTo(const VariantSpec& v, std::ostream* os) { *os << v.name; }
namespace {
namespace THX_FILE_ID {

TEST_P(Registry, RowMatchesTheLayerItBuildsAndTheRulesThxApplies) {
  const VariantSpec& v = GetParam();
  ASSERT_EQ(find_variant(v.name), &*std::find_if(variant_registry().begin(), variant_registry().end(),
                                                 [&](const VariantSpec& r) { return r.name == v.name; }));
  AttentionDims d = resolve(config(v), kD, kD, kD);
  EXPECT_EQ(d.name(), v.name);
  EXPECT_EQ(d.has_P_l(), v.P_l);
  EXPECT_EQ(d.has_P_w(), v.P_w);

  // create(): the class of this variant (its constructor checks the dims are its own), with
  // exactly the row's parameters, the names `thx attention-probe` writes.
  auto layer = make_attention(d);
  EXPECT_EQ(names_of(*layer), v.params);
  EXPECT_EQ(std::count(v.params.begin(), v.params.end(), "P_l"), v.P_l ? 1 : 0);
  EXPECT_EQ(std::count(v.params.begin(), v.params.end(), "P_w"), v.P_w ? 1 : 0);

  // BERT's dense biases: four more parameters where the row takes them.
  if (v.dense_biases) {
    AttentionDims b = d;
    b.biases = true;
    EXPECT_EQ(names_of(*make_attention(b)).size(), v.params.size() + 4);
  }

  // Head counts: h_k / h_v may differ from h exactly when the row leaves them free; the error
  // quotes the row's reason.
  for (const char* key : {"h_k", "h_v"}) {
    AttentionConfig c = config(v);
    (std::string(key) == "h_k" ? c.h_k : c.h_v) = kH / 2;
    const std::string tied = std::string(key) == "h_k" ? v.h_k_tied : v.h_v_tied;
    const std::string err = error_of(c);
    if (!v.per_head) EXPECT_NE(err.find("is not a setting of " + v.name), std::string::npos) << err;
    else if (tied.empty()) EXPECT_EQ(err, "") << key;
    else EXPECT_NE(err.find(tied), std::string::npos) << key << ": " << err;
  }
  // Per-head sizes exist exactly when the row has them.
  AttentionConfig dk = config(v);
  dk.d_k = 3;
  EXPECT_EQ(error_of(dk).empty(), v.per_head) << error_of(dk);
  // Dynamic projections (Appendix A) exactly where the row accepts them.
  AttentionConfig dyn = config(v);
  dyn.dynamic = {"X_l"};
  EXPECT_EQ(error_of(dyn).empty(), v.dynamic) << error_of(dyn);

  // Section 5's multiplies (full convention, static layer, n queries, m memory positions),
  // counted here from the built layer's parameter shapes: each projection is rows x its
  // parameter's size; logits n·m·h_k·d_k, weighted sums n·m·h_v·d_v; P_l and P_w mix n·m
  // positions; the bilinear form: X·P, (XP)·M, W·M, (WM)·Q.
  const int64_t n = 5, m = 7;
  double count = 0;
  std::map<std::string, torch::Tensor> p;
  for (const auto& kv : layer->named_parameters()) p[kv.key()] = kv.value();
  if (v.per_head) {
    count += double(n) * double(p["P_q"].numel()) + double(m) * double(p["P_k"].numel()) +
             double(m) * double(p["P_v"].numel()) + double(n) * double(p["P_o"].numel());
    count += double(n * m) * double(d.h_k * d.d_k + d.h_v * d.d_v);
    if (p.count("P_l")) count += double(n * m) * double(p["P_l"].numel());
    if (p.count("P_w")) count += double(n * m) * double(p["P_w"].numel());
  } else {
    count += double(n) * double(p["P"].numel()) + 2.0 * double(n * m) * double(kD * d.h) +
             double(n) * double(p["Q"].numel());
  }
  EXPECT_DOUBLE_EQ(multiplies(d, n, m, CostConvention::Full), count);
  EXPECT_DOUBLE_EQ(multiplies(d, n, m, CostConvention::Full), v.multiplies(d, n, m, CostConvention::Full));

  // The optimizer's mesh_tf rule: P_q seen combined [d, d_k*h] exactly where the row says.
  if (v.per_head) {
    struct Holder : torch::nn::Module {
      explicit Holder(std::shared_ptr<Attention> a) { register_module("att", std::move(a)); }
    };
    auto holder = std::make_shared<Holder>(layer);
    OptimizerConfig oc;
    oc.factor_attention = "mesh_tf";
    const auto ops = optimized_params(*holder, {{"att/P_q", p["P_q"]}}, oc);
    ASSERT_EQ(ops.size(), 1u);
    EXPECT_EQ(ops[0].view.size(), v.factor_combined ? 2u : 3u);
  }

  // --help and --dump-config offer every name of the registry.
  EXPECT_NE(std::string(variant_help()).find(v.name), std::string::npos);
}

// Every variant's layer, static and (where its row takes them) with dynamic projections, reads no
// memory that nothing wrote (test_util.h's PoisonedCpuMemory: every new CPU tensor NaN): the layer
// built, its output with a [1,h,n,m] bias and a padding mask, and the gradients of its input, memory
// and parameters, in fp32, equal bit for bit to the same run's in memory as the heap gives it.
TEST_P(Registry, ReadNoMemoryNothingWrote) {
  const VariantSpec& v = GetParam();
  std::vector<AttentionConfig> configs = {config(v)};
  if (v.dynamic) {
    configs.push_back(config(v));
    configs.back().dynamic = {"X_l", "M_w"};
  }
  for (const AttentionConfig& c : configs) {
    SCOPED_TRACE(c.dynamic.empty() ? "static" : "dynamic");
    const AttentionDims d = resolve(c, kD, kD, kD);
    EXPECT_TRUE(test::same_in_poisoned_memory([&] {
      torch::manual_seed(9);
      const auto layer = make_attention(d);
      const int64_t b = 2, n = 5, m = 7;
      const torch::Tensor X = torch::randn({b, n, kD}).requires_grad_(true), M = torch::randn({b, m, kD});
      M.requires_grad_(true);
      const torch::Tensor bias = torch::randn({1, d.h, n, m});
      const torch::Tensor mask = (torch::arange(m).view({1, m}) < torch::tensor({m, int64_t{4}}).view({b, 1}))
                                     .view({b, 1, 1, m});
      const torch::Tensor Y = layer->forward(X, M, bias, mask);
      (Y * torch::randn(Y.sizes())).sum().backward();
      std::vector<torch::Tensor> made = {Y.detach(), X.grad(), M.grad()};
      for (const auto& p : layer->parameters()) made.push_back(p.grad());
      return made;
    }));
  }
}

INSTANTIATE_TEST_SUITE_P(AllVariants, Registry, ::testing::ValuesIn(variant_registry()),
                         [](const auto& info) { return info.param.name; });

TEST(RegistryCli, DumpConfigListsTheRegistrysVariantsAndUnknownNamesListThemToo) {
  const auto dump = test::run_thx("--log-level warn pretrain --config " + std::string(THX_SOURCE_DIR) +
                                  "/configs/t5/mini.yaml --dump-config");
  ASSERT_EQ(dump.code, 0) << dump.out;
  const auto bad = test::run_thx("--log-level warn attention-probe --set attention.variant=nope --out /dev/null");
  EXPECT_EQ(bad.code, 2);
  // Every row the binary has (rows that tests register in this process are not in it).
  std::string help, allowed;
  for (const auto& v : variant_registry())
    if (v.paper != "a test")
      help += (help.empty() ? "" : " | ") + v.name, allowed += (allowed.empty() ? "" : ", ") + v.name;
  EXPECT_NE(dump.out.find("variant: multi_head  # " + help + "\n"), std::string::npos) << dump.out;
  EXPECT_NE(bad.out.find("allowed: " + allowed + "\n"), std::string::npos) << bad.out;
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx
