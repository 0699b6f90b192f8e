// The whole T5 against an independent implementation: a tiny model with fixed weights and a
// different attention variant in each layer type; Debian's python3-torch recomputes logits,
// loss and every parameter gradient in float64 from the definitions
// (tests/scripts/paper_reference.py). Skipped when that python lacks torch, numpy or h5py.
//
// Tolerance: thx runs in fp32 through dozens of layers of sums: 2e-5 + 1e-4 * max|ref|
// (fp32 epsilon 6e-8 times the depth and widths here, with margin); a wrong wiring (a
// missing bias, mask, norm or scale) changes results at order 1e-1.
#include <gtest/gtest.h>

#include "common/h5.h"
#include "models/t5.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

AttentionConfig attn(const std::string& variant, int64_t h_k, int64_t h, int64_t h_v, int64_t d_k,
                     int64_t d_v) {
  AttentionConfig a;
  a.variant = variant;
  a.h = h;
  if (variant != "multi_head" && variant != "project_weights") a.h_k = h_k;
  if (variant != "multi_head" && variant != "project_logits") a.h_v = h_v;
  a.d_k = d_k, a.d_v = d_v;
  return a;
}

void check_t5_against_reference(torch::Device device) {
  ModelConfig mc;
  mc.d_model = 16, mc.d_ff = 24, mc.encoder_layers = 2, mc.decoder_layers = 2, mc.z_loss = 1e-2;
  mc.relative_buckets = 8, mc.relative_max_distance = 20;  // small, so that all regimes occur
  const T5Attention a{attn("talking_heads", 3, 4, 2, 5, 6), attn("multi_head", 2, 2, 2, 8, 8),
                      attn("project_weights", 3, 3, 2, 4, 5)};
  torch::manual_seed(9);
  T5 model(mc, a, 45);
  const int64_t B = 2, n = 12, t = 6;
  torch::Tensor inputs = torch::randint(2, 45, {B, n}), targets = torch::randint(2, 45, {B, t});
  inputs.narrow(1, 9, 3)[1].fill_(0);  // padding in the second example
  targets[1][5] = 0;
  torch::Tensor dec = torch::zeros_like(targets);
  dec.narrow(1, 1, t - 1).copy_(targets.narrow(1, 0, t - 1));

  TempDir dir;
  const std::string in = dir.file("in.h5"), out = dir.file("out.h5");
  {
    H5Writer w(in);
    for (const auto& [path, p] : model->named_parameters_by_path()) w.write("/params/" + path, p);
    w.write("/batch/inputs", inputs.to(torch::kInt32));
    w.write("/batch/decoder_inputs", dec.to(torch::kInt32));
    w.write("/batch/targets", targets.to(torch::kInt32));
    w.attr("/", "d_model", "16");
    w.attr("/", "vocab_size", "45");
    w.attr("/", "z_loss", "0.01");
    w.attr("/", "relative_buckets", "8");
    w.attr("/", "relative_max_distance", "20");
    w.commit();
  }
  const std::string cmd = test_python() + " " + std::string(THX_SOURCE_DIR) +
                          "/tests/scripts/t5_reference.py " + in + " " + out + " 2>&1";
  const int status = std::system(cmd.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
    GTEST_SKIP() << test_python() << " lacks torch, numpy or h5py (scripts/setup.sh installs them for Debian's)";
  ASSERT_EQ(status, 0) << cmd;

  model->to(device);
  const auto o = model->forward(inputs.to(device), dec.to(device), targets.to(device));
  o.loss.backward();
  H5Reader ref(out);
  EXPECT_TRUE(close(o.logits.cpu(), ref.read("/logits"), 2e-5, 1e-4)) << "logits";
  EXPECT_NEAR(o.loss.item<double>(), ref.read_scalar("/loss"), 1e-4);
  EXPECT_NEAR(o.nll.item<double>(), ref.read_scalar("/nll"), 1e-4);
  int checked = 0;
  for (const auto& [path, p] : model->named_parameters_by_path()) {
    ASSERT_TRUE(ref.has("/grads/" + path)) << path;
    EXPECT_TRUE(close(p.grad().cpu(), ref.read("/grads/" + path), 2e-5, 1e-4)) << "grad " << path;
    ++checked;
  }
  EXPECT_GT(checked, 40);
}

TEST(T5Reference, LogitsLossAndGradientsMatchAnIndependentImplementation) { check_t5_against_reference(torch::kCPU); }
// The same model, weights and batch on a GPU (its ATen paths: SDPA for multi-head, the tiled
// core for the talking-heads family, the CUDA RMS norm where built) against the same float64
// reference and bounds. Skipped without a GPU.
TEST(T5Reference, OnCudaMatchesTheIndependentImplementation) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  check_t5_against_reference(torch::kCUDA);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
