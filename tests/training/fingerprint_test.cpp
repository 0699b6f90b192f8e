// fingerprint_test.cpp: a refactor changes no number. One optimizer step of the mini T5
// (multi-head and talking-heads) and of the mini ALBERT, run by `thx step-probe` on a synthetic
// corpus, must give the loss, every gradient and every updated parameter recorded in
// fingerprints.json before the training loop was restructured (issue 13, from commit 018b5a9).
//
// A fingerprint is, per tensor, its sum and its sum of absolute values (float64). Tolerance:
// relative 2e-5. The signed sum may cancel to near zero, so its error is measured against the
// tensor's L1 norm: |sum - sum0| <= 2e-5 * abs0 and |abs - abs0| <= 2e-5 * abs0.
//
// The ALBERT entry was recorded again (2026-11-26) when BERT and ALBERT gained their reference
// optimizers' global-norm clipping (optimizer.clip_global_norm, default 1.0 for them): its
// loss and gradients are unchanged, its updated parameters are those of the clipped gradients.
// The T5 entries (clipping off) are still the ones from 018b5a9.
//
// THX_RECORD_FINGERPRINTS=FILE writes the fingerprints of the current code to FILE instead of
// comparing (how fingerprints.json was made; run only on the code being taken as the reference).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/h5.h"
#include "training/training_fixtures.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

using json = nlohmann::json;

struct ProbeCase {
  const char* name;
  const char* config;
  const char* set;
  TokenizerConvention convention;
};

const ProbeCase kCases[] = {
    {"mini_t5_multi_head", "configs/mini/t5.yaml", "", TokenizerConvention::t5},
    {"mini_t5_talking_heads", "configs/mini/t5.yaml", "--set attention.variant=talking_heads",
     TokenizerConvention::t5},
    {"mini_albert_talking_heads", "configs/albert/mini.yaml", "--set attention.variant=talking_heads",
     TokenizerConvention::albert},
};

// {"/loss": [v, |v|], "/grads/<path>": [sum, abs], "/params_after/<path>": [...], ...}
json fingerprints(const std::string& file) {
  H5Reader r(file);
  json j = json::object();
  for (const std::string group : {"/grads", "/params_after"})
    for (const auto& name : r.datasets(group)) {
      const torch::Tensor t = r.read(name).to(torch::kFloat64);
      j[name] = {t.sum().item<double>(), t.abs().sum().item<double>()};
    }
  for (const std::string name : {"/loss", "/nll"}) {
    const double v = r.read_scalar(name);
    j[name] = {v, std::abs(v)};
  }
  return j;
}

json probe(const ProbeCase& c) {
  TempDir dir;
  const std::string prep = prepared_corpus(dir, 120, c.convention);
  const std::string out = dir.file("probe.h5");
  const RunResult r = run_thx(fmt::format("--threads 1 step-probe --config {}/{} --set data.prepared={} {} --out {}",
                                          THX_SOURCE_DIR, c.config, prep, c.set, out));
  EXPECT_EQ(r.code, 0) << r.out;
  return r.code == 0 ? fingerprints(out) : json::object();
}

TEST(Fingerprints, OneStepOfTheMiniModelsIsUnchanged) {
  const std::string reference = std::string(THX_SOURCE_DIR) + "/tests/training/fingerprints.json";
  if (const char* record = std::getenv("THX_RECORD_FINGERPRINTS")) {
    json all = json::object();
    for (const auto& c : kCases) all[c.name] = probe(c);
    std::ofstream(record) << all.dump(1) << "\n";
    GTEST_SKIP() << "recorded fingerprints to " << record;
  }
  std::ifstream in(reference);
  ASSERT_TRUE(in) << reference;
  const json expected = json::parse(in);
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(expected.contains(c.name));
    const json& want = expected[c.name];
    const json got = probe(c);
    // The same tensors: none lost, none added (a renamed parameter is a changed checkpoint).
    std::vector<std::string> want_keys, got_keys;
    for (const auto& [k, v] : want.items()) want_keys.push_back(k);
    for (const auto& [k, v] : got.items()) got_keys.push_back(k);
    ASSERT_EQ(want_keys, got_keys);
    ASSERT_GT(want_keys.size(), 20u);
    for (const auto& [k, w] : want.items()) {
      const double sum0 = w[0], abs0 = w[1], sum = got[k][0], abs = got[k][1];
      if (k.size() > 7 && k.compare(k.size() - 7, 7, "/bias_k") == 0) {
        // The key bias's gradient is zero in exact arithmetic (softmax ignores a shift of a
        // query's logits): what its gradient and its one step hold is rounding residue, which
        // differs between CPUs (recorded ~1e-10 on one, 1e-11 off on another). It must stay noise.
        EXPECT_LT(abs, 1e-6) << k << " is no longer at noise level";
        continue;
      }
      const double tol = 2e-5 * abs0;
      EXPECT_LE(std::abs(sum - sum0), tol) << k << ": sum " << sum << " vs " << sum0;
      EXPECT_LE(std::abs(abs - abs0), tol) << k << ": L1 " << abs << " vs " << abs0;
    }
  }
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
