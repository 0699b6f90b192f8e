// sweep_plan.cpp: what `thx sweep` knows of a pretraining run before it starts, from its
// resolved config: the YAML, the run's model FLOPs, and per layer type the resolved attention
// (the row signature thx table matches), its parameters and its multiplies.
#include <filesystem>
#include <map>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "attention/costs.h"
#include "attention/factory.h"
#include "attention/registry.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/runtime.h"
#include "experiments/bench_train.h"
#include "experiments/sweep.h"
#include "models/spec.h"
#include "training/spec.h"

namespace thx {
namespace {

using json = nlohmann::json;

// The tokenizer of prepared data from its manifest: its vocabulary size and id convention; T5's
// padded 32128 and no convention ("") before it exists or where it cannot be read (the run's own
// reading of it says why).
std::pair<int64_t, std::string> prepared_tokenizer(const std::string& dir) {
  const std::string m = (std::filesystem::path(dir) / "manifest.json").string();
  try {
    if (std::filesystem::exists(m)) {
      const json tok = json::parse(read_file(m)).at("tokenizer");
      return {tok.at("vocab_size").get<int64_t>(), tok.value("convention", "t5")};
    }
  } catch (const std::exception&) {
  }
  return {32128, ""};
}

json attention_json(const AttentionDims& d) {
  json j = {{"variant", d.name()}, {"h_k", d.h_k}, {"h", d.h}, {"h_v", d.h_v},
            {"d_k", d.d_k}, {"d_v", d.d_v}};
  json dyn = json::array();
  for (auto [on, n] : {std::pair{d.X_l, "X_l"}, {d.M_l, "M_l"}, {d.X_w, "X_w"}, {d.M_w, "M_w"}})
    if (on) dyn.push_back(n);
  j["dynamic"] = dyn;
  return j;
}

// The parameters of one attention layer of `d`, counted from the layer built once per distinct
// dims in this process: building one draws its initial values, and the paper's Table 1 sweep has
// 50 runs of 3 layers each, most of them alike (2.2 of the 2.7 s of its --dry-run, before this).
// The key holds every field of AttentionDims: the structured binding names them all, so a field
// added to the struct stops this from compiling until the key has it too.
int64_t attention_parameters(const AttentionDims& d) {
  const auto& [variant, d_X, d_M, d_Y, h_k, h, h_v, d_k, d_v, X_l, M_l, X_w, M_w, dropout, biases] = d;
  static std::mutex mutex;
  static std::map<std::string, int64_t> counted;
  const std::string key = fmt::format("{} {} {} {} {} {} {} {} {} {}{}{}{} {} {}", fmt::ptr(variant), d_X, d_M, d_Y,
                                      h_k, h, h_v, d_k, d_v, X_l, M_l, X_w, M_w, dropout, biases);
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = counted.find(key);
  if (it != counted.end()) return it->second;
  return counted[key] = count_parameters(*make_attention(d));
}

// The run's memory lower bound as its own check counts it (training/pretrain.cpp), for one
// process of train.batch_size / train.grad_accum rows, on the device it will train on.
void add_memory_bound(const PretrainConfig& pc, int64_t vocab, ResolvedRun& r) {
  torch::Device device(torch::kCPU);
  try {  // a device the sweep's process cannot resolve fails in the run's own, with its line
    device = resolve_device(pc.train.device.empty() ? device_request() : pc.train.device, "train.device");
  } catch (const InputError&) {
    return;
  }
  const int64_t rows = pc.train.batch_size / std::max<int64_t>(1, pc.train.grad_accum);
  const MemoryBound b =
      training_memory_lower_bound(pc.spec, vocab, rows, pc.data.inputs_length, trained_outputs(pc), {},
                                  pc.spec.model.recompute && pc.model.encoder_only(), device, false,
                                  pc.train.precision == "bf16", step_memory(pc));
  r.memory = b;
  r.device = device.is_cuda() ? "cuda" : "cpu";
}

}  // namespace

ResolvedRun resolve_pretrain_run(ConfigTree& tree) {
  ResolvedRun r;
  const PretrainConfig pc = load_pretrain_config(tree, &r.yaml);
  const int64_t n = pc.data.inputs_length, t = pc.data.targets_length;
  const ModelSpec& spec = pc.spec;
  r.steps = pc.train.steps;
  r.batch_size = pc.train.batch_size, r.grad_accum = pc.train.grad_accum;
  if (pc.data.synthetic.empty()) r.prepared = pc.data.prepared;
  const bool encoder_only = pc.model.encoder_only();
  // An encoder's MLM head: its vocabulary and predicted positions per example. A generated task
  // (data.synthetic) has no shards: its own vocabulary, and one prediction per query.
  const auto tokenizer = prepared_tokenizer(pc.data.prepared);
  int64_t vocab = tokenizer.first, predictions = pc.data.max_predictions_per_seq;
  // What the run checks of the data once it has read it, checked now: a run that would stop at its
  // start stops the sweep before anything runs, with the line of the sweep file that set the key.
  if (pc.data.synthetic.empty() && !tokenizer.second.empty())
    tree.told([&] { check_data_tokenizer(pc, tokenizer.first, tokenizer.second); });
  if (!pc.data.synthetic.empty()) {
    const RecallOptions o = recall_options(pc.data);
    vocab = o.vocab_size, predictions = o.queries;
  }
  if (pc.model.vocab_size > 0) vocab = pc.model.vocab_size;
  r.precision = pc.train.precision;
  add_memory_bound(pc, vocab, r);
  r.flops = 6.0 * double(pc.train.batch_size) * double(pc.train.steps) *
            (encoder_only ? encoder_forward_multiplies(spec, n, predictions, vocab)
                          : t5_forward_multiplies(spec, n, t, vocab));
  const std::pair<const char*, const AttentionDims*> layers[] = {
      {"encoder_self", &spec.encoder_self}, {"decoder_self", &spec.decoder_self}, {"encoder_decoder", &spec.encoder_decoder}};
  json att, params, mults;
  std::string summary;
  for (const auto& [name, resolved] : layers) {
    if (encoder_only && std::string(name) != "encoder_self") continue;  // no decoder
    const AttentionDims& dims = *resolved;  // with BERT's dense biases where the model has them
    att[name] = attention_json(dims);
    // Per attention layer, at the run's own sizes: n = m = inputs length (as the paper's
    // n = m = 512), and for encoder-decoder attention m = inputs, n = targets.
    params[name] = attention_parameters(dims);
    const bool encdec = std::string(name) == "encoder_decoder";
    mults[name] = multiplies(dims, std::string(name) == "decoder_self" || encdec ? t : n,
                             std::string(name) == "decoder_self" ? t : n);
    summary += (summary.empty() ? "" : "; ") + std::string(name) + " " + dims.summary();
  }
  // One line when all three layer types agree.
  if (encoder_only || (att["encoder_self"] == att["decoder_self"] && att["encoder_self"] == att["encoder_decoder"]))
    summary = spec.encoder_self.summary();
  r.attention = summary;
  r.info["attention"] = att.dump();
  r.info["params_per_att_layer"] = params.dump();
  r.info["multiplies_per_att_layer"] = mults.dump();
  r.info["d_model"] = std::to_string(pc.model.d_model);
  r.info["model"] = json(pc.model.type).dump();
  r.info["inputs_length"] = std::to_string(n);
  r.info["targets_length"] = std::to_string(t);
  r.info["batch_size"] = std::to_string(pc.train.batch_size);
  r.info["precision"] = json(pc.train.precision).dump();
  return r;
}

}  // namespace thx
