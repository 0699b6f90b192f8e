// The memory check's lower bound (models/spec.h) against its formula written out here: fp32
// bytes of each layer run's input and feed-forward units, the output logits, and the attention
// weights [h, n, m] of every attention that keeps them for backward on the device. On the CPU
// every attention keeps them; on a GPU multi-head through scaled_dot_product_attention and the
// talking-heads family on the tiled path keep none, so a long sequence that those paths train in
// a few GB is not refused for weights they never hold (n = 8192 at 48 heads: 155 GB a T5-base
// example counted that way, against the 1.6-1.8 GB the flash kernels took for a layer of 8).
// Where the chosen --th-path alone keeps them (batched, folded, gemm), a line about memory offers
// the tiled path and its bound. A bf16 run's activations count 2 bytes each, and 4 those that
// the CPU's fp32 core for bf16 keeps in fp32.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "attention/fused.h"
#include "attention/kernels.h"
#include "common/log.h"
#include "common/torch_compat.h"
#include "models/spec.h"
#include "models/t5.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

constexpr int64_t kD = 64, kFF = 128, kEnc = 3, kDec = 2, kVocab = 500, kRows = 4, kIn = 96, kOut = 24, kH = 8;

ModelSpec spec_of(const AttentionConfig& enc, const AttentionConfig& dec, const AttentionConfig& cross) {
  ModelConfig m;
  m.d_model = kD, m.d_ff = kFF, m.encoder_layers = kEnc, m.decoder_layers = kDec, m.vocab_size = kVocab;
  return resolve_model_spec(m, {enc, dec, cross});
}

AttentionConfig variant(const std::string& name) {
  AttentionConfig a;
  a.variant = name, a.h = kH;
  return a;
}

// The bound's activations from its definition, given which attentions keep their weights: every
// attention here has heads of d_k = d_v = kD / kH, so Q, K, V and O are kD wide each; the
// encoder-decoder attention's K and V run over the inputs. A general bilinear encoder (no Q,
// K, V of that shape) has none counted. `enc`, `dec`, `cross`: the [h, n, m] tensors each
// attention keeps (0; 1, the weights; 2, the weights and those P_w mixes them into).
double expected(double enc, double dec, double cross, bool bilinear_encoder = false) {
  const double layers = double(kEnc * kIn + kDec * kOut) * (kD + kFF);
  const double weights = enc * kEnc * kH * kIn * kIn + dec * kDec * kH * kOut * kOut + cross * kDec * kH * kOut * kIn;
  const double qkvo = (bilinear_encoder ? 0.0 : double(kEnc) * kIn * 4 * kD) +
                      double(kDec) * (kOut * 4 * kD + (kOut + kIn) * 2 * kD);
  return 4.0 * kRows * (layers + weights + qkvo + double(kOut) * kVocab);
}

double bound(const ModelSpec& s, const torch::Device& device) {
  return training_memory_lower_bound(s, kVocab, kRows, kIn, kOut, {}, false, device).activations;
}

const torch::Device kCpu(torch::kCPU), kCuda(torch::kCUDA);

// A step holds its parameters and the optimizer's state throughout, and their gradients and a
// micro-batch's activations in full only at different times (the first at the backward pass's
// end, the second at its start): the total is those and the larger of the two, not the sum;
// with train.grad_accum > 1 a second micro-batch's activations come beside the gradients.
TEST(MemoryBound, TheTotalIsTheParametersStateAndTheLargerOfGradientsAndActivations) {
  MemoryBound b;
  b.parameters = 1e9, b.gradients = 0.9e9, b.optimizer = 2e9;
  b.activations = 0.5e9;
  EXPECT_DOUBLE_EQ(b.total(), 3.9e9);
  b.activations = 3e9;
  EXPECT_DOUBLE_EQ(b.total(), 6e9);
  b.accumulates = true;
  EXPECT_DOUBLE_EQ(b.total(), 6.9e9);
  b.buckets = 0.9e9;  // a data-parallel rank's
  EXPECT_DOUBLE_EQ(b.total(), 7.8e9);
}

// The bound's parameters are the built model's, less its small tensors (layer norms, the
// relative bias, biases, the embedding's padding; under 2% here); the gradients and the
// optimizer's state count those that train: a frozen embedding has neither.
TEST(MemoryBound, TheParametersAreTheModelsAndTheStateIsTheOptimizersCopiesOfThoseThatTrain) {
  const ModelSpec s = spec_of(variant("talking_heads"), variant("multi_head"), variant("project_logits"));
  torch::manual_seed(1);
  T5 model(s, kVocab);
  double numel = 0;
  for (const auto& p : model->parameters()) numel += double(p.numel());
  const MemoryBound plain = training_memory_lower_bound(s, kVocab, kRows, kIn, kOut);
  EXPECT_LE(plain.parameters, 4 * numel);
  EXPECT_GT(plain.parameters, 0.98 * 4 * numel);
  EXPECT_DOUBLE_EQ(plain.gradients, plain.parameters);
  EXPECT_EQ(plain.optimizer, 0);
  EXPECT_FALSE(plain.accumulates);
  StepMemory adam;
  adam.optimizer_copies = 2, adam.accumulates = true;
  const MemoryBound a = training_memory_lower_bound(s, kVocab, kRows, kIn, kOut, {}, false, kCpu, false, false, adam);
  EXPECT_DOUBLE_EQ(a.parameters, plain.parameters);
  EXPECT_DOUBLE_EQ(a.optimizer, 2 * a.parameters);
  EXPECT_TRUE(a.accumulates);
  StepMemory frozen = adam;
  frozen.embedding_frozen = true;
  const MemoryBound f = training_memory_lower_bound(s, kVocab, kRows, kIn, kOut, {}, false, kCpu, false, false,
                                                    frozen);
  const double embedding = 4.0 * kVocab * kD;  // the unpadded embedding (the bound's)
  EXPECT_DOUBLE_EQ(f.parameters, plain.parameters);
  EXPECT_DOUBLE_EQ(f.gradients, plain.gradients - embedding);
  EXPECT_DOUBLE_EQ(f.optimizer, 2 * (plain.parameters - embedding));
  EXPECT_DOUBLE_EQ(f.activations, plain.activations);
  EXPECT_EQ(f.buckets, 0);
  frozen.data_parallel = true;  // a rank's Reducer: a copy of the gradients of those that train
  EXPECT_DOUBLE_EQ(training_memory_lower_bound(s, kVocab, kRows, kIn, kOut, {}, false, kCpu, false, false, frozen)
                       .buckets,
                   f.gradients);
}

// The refusal names each part, the optimizer's state where there is one, and with
// train.grad_accum > 1 the sum it counts.
TEST(MemoryBound, TheRefusalNamesTheStateAndTheAccumulatedSum) {
  MemoryBound b;
  b.parameters = 1e9, b.gradients = 0.9e9, b.activations = 3e9;
  EXPECT_EQ(memory_parts(b), "parameters 1 GB, and the larger of their gradients, 0.9 GB, and the activations of a "
                             "micro-batch, 3 GB");
  b.optimizer = 1.8e9;
  EXPECT_EQ(memory_parts(b), "parameters 1 GB, the optimizer's state 1.8 GB, and the larger of their gradients, "
                             "0.9 GB, and the activations of a micro-batch, 3 GB");
  b.accumulates = true;
  EXPECT_EQ(memory_parts(b), "parameters 1 GB, the optimizer's state 1.8 GB, their gradients 0.9 GB and the "
                             "activations of a micro-batch 3 GB, which train.grad_accum keeps beside the gradients");
  b.accumulates = false, b.buckets = 0.9e9;
  EXPECT_EQ(memory_parts(b), "parameters 1 GB, the optimizer's state 1.8 GB, c10d's gradient buckets 0.9 GB, and the "
                             "larger of their gradients, 0.9 GB, and the activations of a micro-batch, 3 GB");
  const ModelSpec s = spec_of(variant("multi_head"), variant("multi_head"), variant("multi_head"));
  StepMemory step;
  step.optimizer_copies = 2;
  const MemoryBound with = training_memory_lower_bound(s, kVocab, kRows, kIn, kOut, {}, false, kCpu, false, false,
                                                       step);
  const MemoryBound without = training_memory_lower_bound(s, kVocab, kRows, kIn, kOut);
  const double have = (with.total() + without.total()) / 2;  // fits without the state, not with it
  EXPECT_EQ(training_memory_refusal(s, kVocab, kRows, kIn, kOut, {}, {}, kCpu, have), "");
  const std::string refused = training_memory_refusal(s, kVocab, kRows, kIn, kOut, {}, {}, kCpu, have, false, step);
  EXPECT_NE(refused.find("(" + memory_parts(with) + ")"), std::string::npos) << refused;
}

// On the CPU every attention keeps its weights W, and one with P_w also U = W P_w (the CPU's
// cores keep both; ATen's composition both and more).
TEST(MemoryBound, OnTheCpuEveryAttentionsWeightsCountAndTheMixedOnesWithPw) {
  const ModelSpec s = spec_of(variant("talking_heads"), variant("multi_head"), variant("project_logits"));
  EXPECT_DOUBLE_EQ(bound(s, kCpu), expected(2, 1, 1));
  const ModelSpec w = spec_of(variant("multi_head"), variant("project_weights"), variant("talking_heads"));
  EXPECT_DOUBLE_EQ(bound(w, kCpu), expected(1, 2, 2));
}

TEST(MemoryBound, OnAGpuTheDefaultPathsKeepNoWeights) {
  set_th_path("tiled", false);
  const ModelSpec s = spec_of(variant("talking_heads"), variant("multi_head"), variant("project_weights"));
  // Multi-head keeps none where scaled_dot_product_attention exists (LibTorch 2.x), else it takes
  // ATen's composition, which keeps them.
  EXPECT_DOUBLE_EQ(bound(s, kCuda), expected(false, !THX_HAVE_SDPA, false));
  EXPECT_LT(bound(s, kCuda), bound(s, kCpu));
  set_th_path("flash", false);
  EXPECT_DOUBLE_EQ(bound(s, kCuda), expected(false, !THX_HAVE_SDPA, false));
  set_th_path("tiled", false);
}

TEST(MemoryBound, OnAGpuTheBatchedCompositionDropoutAndDynamicProjectionsKeepThem) {
  const ModelSpec s = spec_of(variant("talking_heads"), variant("multi_head"), variant("talking_heads"));
  set_th_path("batched", false);
  EXPECT_DOUBLE_EQ(bound(s, kCuda), expected(true, !THX_HAVE_SDPA, true));
  set_th_path("tiled", false);
  AttentionConfig dropout = variant("talking_heads"), dynamic = variant("talking_heads"),
                  mh_dropout = variant("multi_head");
  dropout.dropout = 0.1, mh_dropout.dropout = 0.1, dynamic.dynamic = {"X_l"};
  EXPECT_DOUBLE_EQ(bound(spec_of(dropout, mh_dropout, dynamic), kCuda), expected(true, true, true));
  EXPECT_DOUBLE_EQ(bound(spec_of(variant("general_bilinear"), variant("multi_head"), variant("talking_heads")), kCuda),
                   expected(true, !THX_HAVE_SDPA, false, true));
}

TEST(MemoryBound, OnAGpuTheFoldedAndHeadsMajorProductsKeepThem) {
  const ModelSpec s = spec_of(variant("talking_heads"), variant("multi_head"), variant("project_logits"));
  for (const char* path : {"folded", "gemm", "gemm-aten"}) {
    SCOPED_TRACE(path);
    set_th_path(path, false);
    EXPECT_DOUBLE_EQ(bound(s, kCuda), expected(true, !THX_HAVE_SDPA, true));
    // As on the tiled path, whichever is chosen: what the advice below offers.
    EXPECT_DOUBLE_EQ(training_memory_lower_bound(s, kVocab, kRows, kIn, kOut, {}, false, kCuda, true).activations,
                     expected(false, !THX_HAVE_SDPA, false));
  }
  set_th_path("tiled", false);
}

// A line about memory offers the tiled path where the chosen one alone keeps the weights.
TEST(MemoryBound, TheAdviceNamesTheTiledPathWhereOnlyThePathKeepsTheWeights) {
  const ModelSpec th = spec_of(variant("talking_heads"), variant("multi_head"), variant("multi_head"));
  for (const char* path : {"batched", "folded", "gemm", "gemm-aten"}) {
    set_th_path(path, false);
    EXPECT_EQ(th_path_memory_advice(th, kCuda),
              fmt::format("take `--th-path tiled`, which keeps none of the talking-heads weights [b,h,n,m] for "
                          "backward (`--th-path {}` keeps them)", path));
    EXPECT_EQ(th_path_memory_advice(th, kCpu), "") << "the CPU's cores keep them on every path";
  }
  // Where the tiled path keeps them too, or no attention is of the family, there is nothing to offer.
  AttentionConfig dropout = variant("talking_heads");
  dropout.dropout = 0.1;
  EXPECT_EQ(th_path_memory_advice(spec_of(dropout, variant("multi_head"), variant("multi_head")), kCuda), "");
  EXPECT_EQ(th_path_memory_advice(spec_of(variant("multi_head"), variant("multi_head"), variant("multi_head")), kCuda),
            "");
  for (const char* path : {"tiled", "tiled-gemm", "flash", "fused"}) {
    set_th_path(path, false);
    EXPECT_EQ(th_path_memory_advice(th, kCuda), "") << path;
  }
  // The out-of-memory line's hint (pretrain's, fine-tuning's): the offer after ", or ", or nothing.
  const std::string hint = "raise train.grad_accum";
  EXPECT_EQ(with_th_path_advice(hint, th, kCuda), hint);
  set_th_path("gemm", false);
  EXPECT_EQ(with_th_path_advice(hint, th, kCuda), hint + ", or " + th_path_memory_advice(th, kCuda));
  EXPECT_EQ(with_th_path_advice(hint, th, kCpu), hint);
  set_th_path("tiled", false);
}

// The refusal before training: the chosen path's bound against the memory, and the tiled path's.
TEST(MemoryBound, TheRefusalGivesTheTiledPathsBoundWhereThePathKeepsTheWeights) {
  const ModelSpec s = spec_of(variant("talking_heads"), variant("talking_heads"), variant("talking_heads"));
  const std::map<std::string, int64_t> values = {{"train.batch_size", kRows}};
  set_th_path("gemm", false);
  const MemoryBound kept = training_memory_lower_bound(s, kVocab, kRows, kIn, kOut, {}, false, kCuda);
  const MemoryBound tiled = training_memory_lower_bound(s, kVocab, kRows, kIn, kOut, {}, false, kCuda, true);
  const double total = kept.total(), less = tiled.total();
  ASSERT_LT(less, total);
  const double have = (less + total) / 2;
  EXPECT_EQ(training_memory_refusal(s, kVocab, kRows, kIn, kOut, {}, values, kCuda, have),
            fmt::format("{}: training needs at least {} of memory (parameters {}, and the larger of their "
                        "gradients, {}, and the activations of a micro-batch, {}), more than GPU 0's {}; take "
                        "`--th-path tiled`, which keeps none of the talking-heads weights [b,h,n,m] for backward "
                        "(`--th-path gemm` keeps them): at least {} there; nothing was allocated",
                        kept.key == "train.batch_size" ? "train.batch_size 4" : kept.key, format_gb(total),
                        format_gb(kept.parameters), format_gb(kept.gradients), format_gb(kept.activations),
                        format_gb(have), format_gb(less)));
  EXPECT_EQ(training_memory_refusal(s, kVocab, kRows, kIn, kOut, {}, values, kCuda, total * 1.01), "");
  // Where the tiled path does not fit either, the line says so.
  const std::string neither = training_memory_refusal(s, kVocab, kRows, kIn, kOut, {}, values, kCuda, less / 2);
  EXPECT_NE(neither.find(fmt::format("(`--th-path gemm` keeps them): at least {} there, which does not fit "
                                     "either; nothing was allocated", format_gb(less))),
            std::string::npos)
      << neither;
  set_th_path("tiled", false);
  const std::string on_tiled = training_memory_refusal(s, kVocab, kRows, kIn, kOut, {}, values, kCuda, less / 2);
  EXPECT_NE(on_tiled.find("; nothing was allocated"), std::string::npos) << on_tiled;
  EXPECT_EQ(on_tiled.find("--th-path"), std::string::npos) << on_tiled;
}

// A bf16 run keeps at least 2 bytes of each activation (the heads-major products' and the CPU's
// bf16 core's weights are bf16 alone): its bound counts that, and no more; the parameters and
// gradients stay fp32.
TEST(MemoryBound, Bf16CountsTwoBytesAnActivation) {
  const CoreRoute core(Bf16Core::bf16);
  const ModelSpec s = spec_of(variant("talking_heads"), variant("multi_head"), variant("project_logits"));
  const MemoryBound fp32 = training_memory_lower_bound(s, kVocab, kRows, kIn, kOut, {}, false, kCpu);
  const MemoryBound bf16 = training_memory_lower_bound(s, kVocab, kRows, kIn, kOut, {}, false, kCpu, false, true);
  EXPECT_DOUBLE_EQ(fp32.activations, expected(2, 1, 1));
  EXPECT_DOUBLE_EQ(bf16.activations, expected(2, 1, 1) / 2);
  EXPECT_DOUBLE_EQ(bf16.parameters, fp32.parameters);
  EXPECT_GT(fp32.parameters, 0);
  // Memory between the two: refused in fp32, let through in bf16.
  const double have = (fp32.total() + bf16.total()) / 2;
  EXPECT_NE(training_memory_refusal(s, kVocab, kRows, kIn, kOut, {}, {}, kCpu, have), "");
  EXPECT_EQ(training_memory_refusal(s, kVocab, kRows, kIn, kOut, {}, {}, kCpu, have, true), "");
}

// Where bf16 takes the CPU's fp32 core (attention/fused.h: heads of 16 or less without AMX, or
// THX_BF16_CORE=fp32), that core keeps Q, K and V widened to fp32, and its weights in fp32: 2
// bytes more of each; O, the output rounded to bf16, stays at 2. Not for a GPU, and not for
// attention that takes ATen's composition (dropout here).
TEST(MemoryBound, Bf16OnTheFp32CoreCountsQKVAndTheWeightsAtFourBytes) {
  const ModelSpec s = spec_of(variant("talking_heads"), variant("multi_head"), variant("project_logits"));
  auto bf16_bound = [&](const ModelSpec& spec, const torch::Device& d) {
    return training_memory_lower_bound(spec, kVocab, kRows, kIn, kOut, {}, false, d, false, true).activations;
  };
  const CoreRoute core(Bf16Core::fp32);
  // Every Q, K and V here is kD wide; the talking-heads encoder keeps W and U, the others W.
  const double enc = kEnc * (3.0 * kD * kIn + 2.0 * kH * kIn * kIn);
  const double dec = kDec * (3.0 * kD * kOut + 1.0 * kH * kOut * kOut);
  const double cross = kDec * (kD * kOut + 2.0 * kD * kIn + 1.0 * kH * kOut * kIn);  // Q over targets, K, V inputs
  EXPECT_DOUBLE_EQ(bf16_bound(s, kCpu), expected(2, 1, 1) / 2 + 2.0 * kRows * (enc + dec + cross));
  EXPECT_DOUBLE_EQ(bf16_bound(s, kCuda), bound(s, kCuda) / 2);
  AttentionConfig dropped = variant("talking_heads");
  dropped.dropout = 0.1;
  const ModelSpec d = spec_of(dropped, variant("multi_head"), variant("project_logits"));
  EXPECT_DOUBLE_EQ(bf16_bound(d, kCpu), expected(2, 1, 1) / 2 + 2.0 * kRows * (dec + cross));
  {
    const CoreRoute bf16(Bf16Core::bf16);
    EXPECT_DOUBLE_EQ(bf16_bound(s, kCpu), expected(2, 1, 1) / 2);
  }
  set_fused_attention(false);  // ATen's composition everywhere
  const double unfused = bf16_bound(s, kCpu);
  set_fused_attention(true);
  EXPECT_DOUBLE_EQ(unfused, expected(2, 1, 1) / 2);
}

// The rule's keys are each attention's own: 64 heads of 1 mixed on tiles over 256 inputs take the
// bf16 core in the encoder (64 x 256 reaches kBf16CoreHeadRows) and in the encoder-decoder
// attention (24 queries of those 256 keys), the decoder's (24 targets) the fp32 core, on a CPU
// without AMX-BF16 whose bf16 mixings run on tiles; with 255 inputs all three the fp32 core.
TEST(MemoryBound, Bf16CountsTheFp32CoreByEachAttentionsOwnLengths) {
  constexpr int64_t h = 64, d = kD / h;
  AttentionConfig th = variant("talking_heads"), mh = variant("multi_head"), pl = variant("project_logits");
  th.h = mh.h = pl.h = h;
  const ModelSpec s = spec_of(th, mh, pl);
  auto bf16_bound = [&](Bf16Core choice, int64_t n_in) {
    const CoreRoute core(choice);
    return training_memory_lower_bound(s, kVocab, kRows, n_in, kOut, {}, false, kCpu, false, true).activations;
  };
  const bool amx = kernels::amx::cpu_has_amx(), tiles = bf16_mixings_on_tiles(h, h, h, true, true);
  for (const int64_t n_in : {256, 255}) {
    const double automatic = bf16_bound(Bf16Core::automatic, n_in), all_bf16 = bf16_bound(Bf16Core::bf16, n_in),
                 all_fp32 = bf16_bound(Bf16Core::fp32, n_in);
    // The encoder's layers' Q, K, V, and the talking-heads weights W and U, 2 bytes more each; the
    // encoder-decoder attention's Q over the targets, K and V over the inputs, and its weights W
    // (project_logits: no U).
    const double encoder = 2.0 * kRows * kEnc * (3.0 * d * h * n_in + 2.0 * h * n_in * n_in);
    const double cross = 2.0 * kRows * kDec * (d * h * kOut + 2.0 * d * h * n_in + 1.0 * h * kOut * n_in);
    EXPECT_LT(all_bf16 + encoder + cross, all_fp32) << "the decoder's self-attention counts too";
    if (amx)
      EXPECT_DOUBLE_EQ(automatic, all_bf16);
    else if (tiles && n_in == 256)
      EXPECT_DOUBLE_EQ(automatic, all_fp32 - encoder - cross);
    else
      EXPECT_DOUBLE_EQ(automatic, all_fp32) << "n_in = " << n_in;
  }
}

TEST(MemoryBound, WithRecomputeOneEncoderLayersWeightsCountWhereKept) {
  ModelConfig m;
  m.type = "bert", m.d_model = kD, m.d_ff = kFF, m.encoder_layers = kEnc, m.vocab_size = kVocab;
  const ModelSpec s = resolve_model_spec(m, {variant("talking_heads"), {}, {}});
  auto recomputed = [&](const torch::Device& d) {
    return training_memory_lower_bound(s, kVocab, kRows, kIn, kOut, {}, true, d).activations;
  };
  // The layers' inputs, one layer's own (input, feed-forward units, Q, K, V and O, weights), the
  // predictions' logits.
  const double own = double(kIn) * (kD + kFF + 4 * kD), inputs = double(kEnc) * kIn * kD;
  const double logits = double(kOut) * kVocab;
  EXPECT_DOUBLE_EQ(recomputed(kCpu), 4.0 * kRows * (inputs + own + 2.0 * kH * kIn * kIn + logits));  // W and U
  set_th_path("tiled", false);
  EXPECT_DOUBLE_EQ(recomputed(kCuda), 4.0 * kRows * (inputs + own + logits));
}

// The refusal counts the run as configured: an encoder with model.recompute is not refused for
// memory that only the layers kept without it would take; without it, the refusal says that
// model.recompute would fit. (Until 2026-11-30 it counted every run as without.)
TEST(MemoryBound, TheRefusalCountsModelRecompute) {
  ModelConfig m;
  m.type = "bert", m.d_model = kD, m.d_ff = kFF, m.encoder_layers = kEnc, m.vocab_size = kVocab;
  const ModelSpec plain = resolve_model_spec(m, {variant("talking_heads"), {}, {}});
  m.recompute = true;
  const ModelSpec recomputing = resolve_model_spec(m, {variant("talking_heads"), {}, {}});
  const MemoryBound all = training_memory_lower_bound(plain, kVocab, kRows, kIn, kOut, {}, false, kCpu);
  const MemoryBound less = training_memory_lower_bound(plain, kVocab, kRows, kIn, kOut, {}, true, kCpu);
  const double have = (all.total() + less.total()) / 2;
  EXPECT_EQ(training_memory_refusal(recomputing, kVocab, kRows, kIn, kOut, {}, {}, kCpu, have), "");
  const std::string refused = training_memory_refusal(plain, kVocab, kRows, kIn, kOut, {}, {}, kCpu, have);
  EXPECT_NE(refused.find(fmt::format("; with model.recompute: true (each layer recomputed in the backward pass) at "
                                     "least {}, which fits; nothing was allocated",
                                     format_gb(less.total()))),
            std::string::npos)
      << refused;
  // Where even recomputing does not fit, the refusal does not offer it.
  const double tiny = less.total() / 2;
  EXPECT_EQ(training_memory_refusal(plain, kVocab, kRows, kIn, kOut, {}, {}, kCpu, tiny).find("model.recompute"),
            std::string::npos);
  EXPECT_NE(training_memory_refusal(recomputing, kVocab, kRows, kIn, kOut, {}, {}, kCpu, tiny), "");
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
