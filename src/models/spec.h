// spec.h: what a model is built from, resolved once: the model block and the attention of
// each layer type as validated AttentionDims (head counts and sizes resolved, BERT/ALBERT's
// dense biases decided by the variant's registry row). The builders (T5, EncoderModel) read it
// and resolve nothing themselves; training/spec.h makes it from a config.
#pragma once
#include "attention/config.h"
#include "models/config.h"

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace thx {

// The attention blocks of the three layer types, as written (after inheritance).
struct T5Attention {
  AttentionConfig encoder_self, decoder_self, encoder_decoder;
};

struct ModelSpec {
  ModelConfig model;
  // T5: all three. BERT/ALBERT: encoder_self only (decoder_self, encoder_decoder unresolved).
  AttentionDims encoder_self, decoder_self, encoder_decoder;
};

// Validate and resolve; a ConfigError names the block (attention_encoder_self, ...) and key.
ModelSpec resolve_model_spec(const ModelConfig& model, const T5Attention& attention);

// The config blocks each layer type's attention was written in, for the keys of errors.
struct AttentionPaths {
  std::string encoder_self = "attention", decoder_self = "attention", encoder_decoder = "attention";
};
// The attention of each layer type the model has (T5: three, BERT/ALBERT: encoder_self),
// resolved once; the model block must be validated already (validate(ModelConfig)).
ModelSpec resolve_attention_spec(const ModelConfig& model, const T5Attention& attention, const AttentionPaths& paths);

// A lower bound of the memory one training step needs, so that an absurd size is refused,
// naming its key, before anything is allocated. Counted, 4 bytes an element: the parameters, the
// gradients and optimizer state of those that train (`step`), and what one micro-batch of `rows`
// examples must keep for the backward pass (`bf16`: 2 bytes, the least a bf16 run keeps of each,
// the attention weights of the heads-major and folded products or of the CPU's cores among
// them): each layer's input and feed-forward hidden units, its attention's Q, K, V and O
// (general bilinear's not counted), its attention weights (on the CPU, with P_w, the mixed
// weights U as well), and the output logits, for inputs of `n_in` positions and `n_out` outputs
// (T5: targets; BERT/ALBERT: the masked positions predicted). Real use is higher: a training
// step on the CPU allocates 1.01 to 1.5 times the bound (tests/models/memory_bound_measured_test.cpp,
// which holds it below). `key` names the setting whose reduction to 1 lowers the bound most.
struct MemoryKeys {  // the config keys of the sizes the caller takes from its own blocks
  std::string batch = "train.batch_size", inputs = "data.inputs_length", outputs = "data.targets_length";
};
// What a step keeps beside the model and a micro-batch's activations, as the run's optimizer and
// train blocks set it (training/spec.h's step_memory) and the launch (data_parallel).
struct StepMemory {
  double optimizer_copies = 0;    // fp32 copies of the trained parameters in the optimizer's state
  bool accumulates = false;       // train.grad_accum > 1
  bool embedding_frozen = false;  // the shared embedding has no gradient and no state (T5 fine-tuning)
  bool data_parallel = false;     // a rank of several: c10d's Reducer keeps the gradients' buckets
  // The elements of the optimizer's statistics for a parameter of a shape (an attention
  // projection's with its variant; training/optimizer.h's optimizer_statistics: Adafactor's), for
  // the matrices the bound counts; none where empty.
  std::function<double(const std::vector<int64_t>&, const VariantSpec*)> statistics;
};
struct MemoryBound {
  double parameters = 0, gradients = 0, optimizer = 0, activations = 0;  // bytes
  double buckets = 0;  // a data-parallel rank's: a flat copy of the gradients, kept from the start
  bool accumulates = false;
  std::string key;
  // What the step holds at least at once: the parameters, the optimizer's state and the
  // gradients' buckets throughout, and the larger of the gradients and the activations. The
  // gradients are made during the backward pass as the activations it has used are freed (a
  // step starts without them, training/loop.cpp), so both in full exist at once only from a
  // step's second micro-batch on (`accumulates`): then their sum.
  double total() const {
    return parameters + optimizer + buckets +
           (accumulates ? gradients + activations : std::max(gradients, activations));
  }
};
// With `recompute` (an encoder's model.recompute) the activations are the layers' inputs and
// one layer's own: what the backward pass then keeps at once. The attention weights [h, n, m] of
// an example are counted for the attentions that keep them for backward on `device`
// (keeps_attention_weights, attention/fused.h: on a GPU, none on the default paths), or with
// `on_tiled_path`, those that would keep them on the tiled path (`--th-path tiled`). With
// `bf16` an activation counts 2 bytes, and 4 for the Q, K, V and weights of an attention that
// takes the CPU's fp32 core (bf16_on_fp32_core, attention/fused.h), which keeps them in fp32.
MemoryBound training_memory_lower_bound(const ModelSpec& spec, int64_t vocab, int64_t rows, int64_t n_in,
                                        int64_t n_out, const MemoryKeys& names = {}, bool recompute = false,
                                        const torch::Device& device = torch::Device(torch::kCPU),
                                        bool on_tiled_path = false, bool bf16 = false, const StepMemory& step = {});
// Where an attention of `spec` keeps its weights [b,h,n,m] for backward on `device` only because
// of the chosen `--th-path` (batched, folded, gemm: on a GPU), what a line about memory adds:
// "take `--th-path tiled`, which keeps none of the talking-heads weights [b,h,n,m] for backward
// (`--th-path gemm` keeps them)"; else "".
std::string th_path_memory_advice(const ModelSpec& spec, const torch::Device& device);
// An out-of-memory line's `hint` (what to change: "raise train.grad_accum ..."), with
// th_path_memory_advice's offer after ", or " where it applies; else the hint as it is.
std::string with_th_path_advice(const std::string& hint, const ModelSpec& spec, const torch::Device& device);
// The bound's parts as a refusal names them: "parameters P GB, the optimizer's state S GB, and the
// larger of their gradients, G GB, and the activations of a micro-batch, A GB" (no state: that
// part left out; a data-parallel rank's ", c10d's gradient buckets B GB" after the state;
// `accumulates`: "..., their gradients G GB and the activations ... A GB, which
// train.grad_accum keeps beside the gradients").
std::string memory_parts(const MemoryBound& b);
// A run's line for its log: "memory: at least X GB a process while it trains (<memory_parts>;
// micro-batches of `rows` examples), of <device's owner> Y GB" (the memory its check compares).
std::string memory_line(const MemoryBound& b, int64_t rows, const torch::Device& device);
// "<key> <value>: training needs at least X GB of memory (<memory_parts>), more than this machine's Y GB;
// nothing was allocated" when the bound exceeds `have` bytes of `device` (the machine's, or a
// GPU's own), with th_path_memory_advice and the tiled path's bound where it applies; else "".
// The bound is the run's as configured (an encoder's model.recompute counted); an encoder
// without it that would fit with it is told so. `values` gives the values of the keys the
// message may name.
std::string training_memory_refusal(const ModelSpec& spec, int64_t vocab, int64_t rows, int64_t n_in, int64_t n_out,
                                    const MemoryKeys& names, const std::map<std::string, int64_t>& values,
                                    const torch::Device& device, double have, bool bf16 = false,
                                    const StepMemory& step = {});
// InputError with training_memory_refusal's line where the bound exceeds the memory of `device`;
// else the bound (the run as configured), for the run's log.
MemoryBound check_training_memory(const ModelSpec& spec, int64_t vocab, int64_t rows, int64_t n_in, int64_t n_out,
                                  const MemoryKeys& names, const std::map<std::string, int64_t>& values,
                                  const torch::Device& device, bool bf16, const StepMemory& step = {});

}  // namespace thx
