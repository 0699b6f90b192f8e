#include "eval/finetune.h"
#include "eval/predict.h"

#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/determinism.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/precision.h"
#include "common/runtime.h"
#include "common/signals.h"
#include "eval/finetune_encoder.h"
#include "eval/finetune_t5.h"
#include "distributed/dist.h"
#include "distributed/launch.h"
#include "training/loop.h"
#include "training/optimizer.h"
#include "training/run_dir.h"
#include "training/tensorboard.h"
#include "data/tokenizer.h"
#include "models/encoder.h"
#include "models/heads.h"
#include "models/t5.h"
#include "models/spec.h"

namespace thx {
namespace fs = std::filesystem;

namespace {

// The resolved finetune.yaml of a stored run, as this code reads it (for --resume's check).
std::string normalize_finetune(const std::string& yaml, const std::string& origin) {
  ConfigTree tree;
  tree.merge_text(yaml, origin);
  tree.resolve_paths({"finetune.pretrained", "finetune.tokenizer", "finetune.data"});  // a stored relative path: the cwd's
  return cfg::to_yaml(load_config<FinetuneRunConfig>(tree, [](const FinetuneRunConfig&) {}));
}

// The fine-tuned parameters `thx eval --checkpoint` names for a task: the file itself, or in a
// `thx finetune` directory <task>.h5 (BERT/ALBERT, one run per task) or model.h5 (T5's mixture).
std::string finetuned_file(const std::string& checkpoint, const Pretrained& model, const std::string& task) {
  if (!fs::is_directory(checkpoint)) return checkpoint;
  return (fs::path(checkpoint) / (model.config.model.encoder_only() ? task + ".h5" : "model.h5")).string();
}

// Every task's rows, read once before anything is written (a malformed row stops here).
std::map<std::string, Splits> read_tasks(const FinetuneConfig& f, bool need_train) {
  std::map<std::string, Splits> data;
  for (const auto& t : f.tasks) data[t] = read_splits(f, t, need_train);
  return data;
}

// The model the trainers need, built here from the pretrained configuration and the tokenizer
// and given `ck`'s parameters (and, for a fine-tuned encoder, its task heads): a tokenizer or
// checkpoint of another model, or (with `run`, fine-tuning) a batch too large for the machine,
// stops here, before the output directory exists. Fine-tuning's first trainer takes the model
// (FinetuneJob::checked): built under finetune.seed with the run's dropout, as it would build it.
CheckedModel check_model(const PretrainConfig& pretrained, const std::string& tokenizer, const Checkpoint& ck,
                         const std::string& file, const std::vector<std::string>& head_tasks = {},
                         const FinetuneRunConfig* run = nullptr,
                         const torch::Device& device = torch::Device(torch::kCPU)) {
  const FinetuneConfig* f = run ? &run->finetune : nullptr;
  const PretrainConfig pc = f ? with_dropout(pretrained, *f) : pretrained;
  torch::NoGradGuard no_grad;
  const Tokenizer tok(tokenizer);
  const int64_t vocab = pc.model.vocab_size > 0 ? pc.model.vocab_size : tok.vocab_size();
  check_spec(pc);
  const ModelSpec& spec = pc.spec;
  if (f) {  // fine-tuning: its batches, before anything is allocated
    const int64_t outputs = pc.model.encoder_only() ? 0 : f->targets_length;
    const int64_t rows = f->batch_size / dist::world_size();
    const std::map<std::string, int64_t> values = {
        {"finetune.batch_size", f->batch_size}, {"finetune.inputs_length", f->inputs_length},
        {"finetune.targets_length", f->targets_length}, {"model.d_ff", pc.model.d_ff},
        {"model.vocab_size", vocab}, {"model.d_model", pc.model.d_model},
        {"attention.h", spec.encoder_self.h}};
    // No train.grad_accum here; T5 keeps its shared embedding fixed unless told not to.
    const StepMemory step{optimizer_state_copies(run->optimizer), false,
                          !pc.model.encoder_only() && f->freeze_embedding, dist::world_size() > 1,
                          optimizer_statistics(run->optimizer)};
    MemoryBound bound;
    try {
      bound = check_training_memory(spec, vocab, rows, f->inputs_length, outputs,
                                    {"finetune.batch_size", "finetune.inputs_length", "finetune.targets_length"},
                                    values, device, train_precision(*f, pretrained) == "bf16", step);
    } catch (const ConfigError& e) {  // a size of the pretrained model's: its run's config, not this one's
      if (e.key.rfind("finetune.", 0) == 0) throw;
      throw InputError(fmt::format("{} (the pretrained model's, {})", e.line(), file));
    }
    thx::log("finetune")->info("{}", memory_line(bound, rows, device));
  }
  // With model.vocab_size 0 the vocabulary is the tokenizer's: a mismatch is the tokenizer's.
  auto copy = [&](const std::vector<std::pair<std::string, torch::Tensor>>& params) {
    try {
      copy_parameters(params, ck.params, file);
    } catch (const InputError& e) {
      if (pc.model.vocab_size > 0) throw;
      throw InputError(fmt::format("{}; the tokenizer {} ({} ids) is not the one it was pretrained with?", e.what(),
                                   tokenizer, tok.vocab_size()));
    }
  };
  if (f) torch::manual_seed(uint64_t(f->seed));
  CheckedModel m;
  if (!pc.model.encoder_only()) {
    require_convention(tok, TokenizerConvention::t5, tokenizer, "T5 fine-tuning");
    m.t5 = T5(spec, vocab);
    copy(m.t5->named_parameters_by_path());
    return m;
  }
  require_convention(tok, TokenizerConvention::albert, tokenizer, "BERT/ALBERT fine-tuning");
  m.encoder = EncoderModel(spec, vocab, false);
  copy(m.encoder->named_parameters_by_path());
  for (const auto& task : head_tasks) {
    const TaskHead h(pc.model.d_model, head_outputs(task_spec(task)));
    copy_parameters({{"heads/" + task + "/w", h->w}, {"heads/" + task + "/bias", h->b}}, ck.params, file);
  }
  return m;
}

// Both precisions on this device, each named by the key that set it (InputError, exit 2).
void check_fine_tuning_precision(const FinetuneConfig& f, const PretrainConfig& pc, const torch::Device& device) {
  check_precision(train_precision(f, pc), device,
                  f.precision.empty() ? "finetune.precision (the pretrained run's train.precision)" : "finetune.precision");
  if (!f.eval_precision.empty()) check_precision(f.eval_precision, device, "finetune.eval_precision");
}

// The recipe against the pretrained model: the model type it is for, the tasks an encoder has
// heads for, and inputs no longer than an encoder's position table.
void check_recipe_fits(const FinetuneConfig& f, const Pretrained& p) {
  const ModelConfig& m = p.config.model;
  if (!f.model_type.empty() && f.model_type != m.type)
    throw ConfigError("finetune.model_type",
                      fmt::format("this recipe is for model.type {}, but {} has model.type {}; use a recipe for "
                                  "{} (configs/*/finetune-*.yaml), or --set finetune.model_type={} to run this one "
                                  "on it anyway", f.model_type, p.path, m.type, m.type, m.type));
  if (!m.encoder_only()) return;
  for (const auto& t : f.tasks)
    if (t == "record")
      throw ConfigError("finetune.tasks", "record needs an entity-ranking head, which BERT/ALBERT fine-tuning does "
                                          "not have; T5 fine-tunes it as text to text");
  if (f.inputs_length > m.max_positions)
    throw ConfigError::leading(
        "finetune.inputs_length",
        fmt::format("finetune.inputs_length {}: the pretrained {} ({}) has model.max_positions {} positions; lower "
                    "finetune.inputs_length to at most {}", f.inputs_length, m.type, p.path, m.max_positions,
                    m.max_positions));
}

// The tokenizer and each task's `splits` exist, named by the key that gives them (ConfigError:
// the command names its file and line).
void check_tokenizer_and_data(const FinetuneConfig& f, const std::string& tokenizer,
                              const std::vector<std::string>& splits) {
  if (!fs::is_regular_file(tokenizer)) {
    if (!f.tokenizer.empty()) throw ConfigError("finetune.tokenizer", tokenizer + ": no such tokenizer model");
    throw InputError(fmt::format("{}: no such tokenizer model (the pretraining data's, as its manifest names it); "
                                 "set finetune.tokenizer to where it is now", tokenizer));
  }
  for (const auto& t : f.tasks)
    for (const auto& split : splits) {
      const std::string path = task_path(f.data, t, split);
      if (!fs::exists(path))
        throw ConfigError("finetune.data", fmt::format("{}: not found (task {}, split {})", path, t, split));
    }
}

}  // namespace

int run_finetune(const FinetuneRunConfig& config, const Pretrained& pretrained, const std::string& out_dir,
                  const FinetuneOptions& options) {
  // Everything that can be checked is checked before the output directory is touched.
  validate(config.finetune);
  check_output_dir(out_dir, "--out");  // where it will be made, before the data and the model are read
  check_recipe_fits(config.finetune, pretrained);
  const std::string tokenizer = tokenizer_path(config.finetune, pretrained.config);
  check_tokenizer_and_data(config.finetune, tokenizer, {"train", "dev"});
  RunDirOptions ro;
  ro.dir = out_dir, ro.flag = "--out", ro.config_file = kFinetuneConfigFile, ro.yaml = cfg::to_yaml(config);
  ro.resume = options.resume, ro.allow_changes = options.allow_changes, ro.normalize = normalize_finetune;
  ro.checkpoint_dirs.push_back((fs::path(out_dir) / "checkpoints").string());
  for (const auto& t : config.finetune.tasks) {
    ro.checkpoint_dirs.push_back((fs::path(out_dir) / "checkpoints" / t).string());
    ro.results.push_back((fs::path(out_dir) / (t + ".json")).string());
  }
  ro.log_file = "finetune.log";
  const torch::Device device = resolve_device(device_request(), "--device");
  dist::check_device(device, "--device");
  const DeterminismScope determinism(config.finetune.deterministic, device, "finetune.deterministic");
  if (config.finetune.deterministic)
    thx::log("finetune")->info("deterministic algorithms (finetune.deterministic): each step repeats to the bit on {}",
                               device.str());
  {
    check_fine_tuning_precision(config.finetune, pretrained.config, device);
    const std::string e = batch_split_error("finetune.batch_size", config.finetune.batch_size, 1, dist::world_size());
    if (!e.empty()) throw InputError(e);
  }
  // Only rank 0 has the output directory (the others may be on other nodes). Checked here, before
  // the data and the model are read; written only once the first trainer opens its outputs.
  std::optional<RunDirectory> dir;
  dist::on_rank0([&] { dir.emplace(ro); });
  std::map<std::string, Splits> data = read_tasks(config.finetune, true);
  CheckedModel checked =
      check_model(pretrained.config, tokenizer, pretrained.checkpoint, pretrained.path, {}, &config, device);
  // The outputs open once, when the first trainer has read the checkpoint it resumes from.
  std::optional<EventWriter> events;
  bool opened = false;
  auto open_outputs = [&]() -> EventWriter* {
    if (!dir) return nullptr;
    if (!opened) events.emplace((fs::path(out_dir) / "tb").string()), dir->open(), opened = true;
    return &*events;
  };
  const FinetuneJob job{config, pretrained, out_dir, tokenizer, ro.yaml, options.resume, open_outputs, std::move(data),
                        device, checked};
  return pretrained.config.model.encoder_only() ? finetune_encoder(job) : finetune_t5(job);
}

namespace {

// What `thx eval` and `thx predict` check and read before anything is written: the recipe
// against the model, the precision, the tokenizer, and each task's fine-tuned file (read once).
struct EvalInputs {
  std::string precision, tokenizer;
  torch::Device device{torch::kCPU};
  std::map<std::string, Checkpoint> loaded;  // by file
  std::vector<std::string> files;            // per task of config.finetune.tasks
};

EvalInputs eval_inputs(const FinetuneRunConfig& config, const Pretrained& model, const std::string& checkpoint,
                       bool dev_sets) {
  if (!fs::exists(checkpoint)) throw InputError(fmt::format("{}: no such checkpoint", checkpoint));
  validate(config.finetune);
  check_recipe_fits(config.finetune, model);
  EvalInputs in;
  in.precision = eval_precision(config.finetune, model.config);  // as fine-tuning evaluated
  in.device = resolve_device(device_request(), "--device");
  check_precision(in.precision, in.device,
                  !config.finetune.eval_precision.empty() ? "finetune.eval_precision"
                  : !config.finetune.precision.empty()    ? "finetune.precision"
                                                          : "finetune.precision (the pretrained run's train.precision)");
  in.tokenizer = tokenizer_path(config.finetune, model.config);
  check_tokenizer_and_data(config.finetune, in.tokenizer, dev_sets ? std::vector<std::string>{"dev"}
                                                                    : std::vector<std::string>{});
  for (const auto& t : config.finetune.tasks) {
    const std::string file = finetuned_file(checkpoint, model, t);
    THX_CHECK(fs::is_regular_file(file), "{}: no fine-tuned parameters for task {} (--checkpoint)", file, t);
  }
  for (const auto& t : config.finetune.tasks) {
    const std::string file = finetuned_file(checkpoint, model, t);
    if (!in.loaded.count(file)) in.loaded[file] = load_checkpoint(file);
    check_model(model.config, in.tokenizer, in.loaded[file], file,
                model.config.model.encoder_only() ? std::vector<std::string>{t} : std::vector<std::string>{});
    in.files.push_back(file);
  }
  return in;
}

}  // namespace

void run_eval(const FinetuneRunConfig& config, const Pretrained& model, const std::string& checkpoint,
              const std::string& out) {
  // As run_finetune: every input is checked before the output directory is created.
  const fs::path beside = fs::is_directory(checkpoint) ? fs::path(checkpoint) : fs::path(checkpoint).parent_path();
  const std::string out_dir = out.empty() ? (beside / "eval").string() : out;
  check_output_dir(out_dir, "--out");
  // A fine-tuning run's own results (<task>.json, its best evaluation and history) have the names
  // eval's would: never overwritten.
  if (fs::exists(fs::path(out_dir) / kFinetuneConfigFile))
    throw InputError(fmt::format("--out {}: a fine-tuning run's folder (it holds finetune.yaml), whose results eval "
                                 "would overwrite; choose another (without --out: {})", out_dir,
                                 (beside / "eval").string()));
  EvalInputs in = eval_inputs(config, model, checkpoint, true);
  std::map<std::string, Splits> data = read_tasks(config.finetune, false);
  const bool own_dir = !fs::exists(out_dir);
  // SIGINT, SIGTERM: the evaluation stops within a batch (check_stop). From before the folder is
  // made, as prepare's: a signal between the two then removes it too, instead of ending thx at
  // once with an empty folder left.
  const SignalScope signals;
  create_output_dir(out_dir, "--out");
  const FinetuneJob job{config, model, out_dir, in.tokenizer, cfg::to_yaml(config), false, {}, std::move(data),
                        in.device, {}};
  PrecisionScope scope(in.precision);
  const std::vector<std::string>& tasks = config.finetune.tasks;
  thx::log("eval")->debug("evaluating {} into {}", fmt::join(tasks, ", "), out_dir);
  size_t done = 0;  // tasks whose results are written (BERT/ALBERT: one after another; T5: all at the end)
  try {
    if (model.config.model.encoder_only()) {
      for (; done < in.files.size(); ++done)
        eval_encoder_task(job, tasks[done], in.loaded[in.files[done]], in.files[done]);
    } else {
      eval_t5(job, in.loaded[in.files.front()], in.files.front());
    }
  } catch (const EvaluationStopped&) {
    std::error_code ec;
    if (own_dir && done == 0) fs::remove(out_dir, ec);  // (empty: nothing was written)
    const auto first = tasks.begin(), now = first + long(done);
    const std::string evaluating =
        model.config.model.encoder_only() ? *now : fmt::format("{}", fmt::join(tasks, ", "));
    const std::string kept = done == 0 ? "nothing written"
                                       : fmt::format("the results of {} are in {}", fmt::join(first, now, ", "), out_dir);
    throw Interrupted(stop_signal(), fmt::format("eval: interrupted by {} while evaluating {}; {}",
                                                 signal_name(stop_signal()), evaluating, kept));
  }
}

std::vector<std::string> predict_task(const FinetuneRunConfig& recipe, const Pretrained& model,
                                      const std::string& checkpoint, const std::string& task,
                                      const std::vector<std::string>& lines, const std::string& where) {
  FinetuneRunConfig config = recipe;
  config.finetune.tasks = {task};
  task_spec(task);  // an unknown task: the list of known ones
  std::map<std::string, Splits> data;
  data[task].dev.task = task, data[task].dev.split = "input", data[task].dev.path = where;
  data[task].dev.examples = predict_examples(task, lines, where);
  EvalInputs in = eval_inputs(config, model, checkpoint, false);
  if (lines.empty()) return {};
  const FinetuneJob job{config, model, "", in.tokenizer, cfg::to_yaml(config), false, {}, std::move(data), in.device, {}};
  PrecisionScope scope(in.precision);
  const SignalScope signals;  // SIGINT, SIGTERM: the predictions stop within a batch (check_stop)
  thx::log("predict")->debug("{}: predicting {} lines", where, lines.size());
  std::vector<std::string> out;
  try {
    if (model.config.model.encoder_only()) {
      out = evaluate_encoder_task(job, task, in.loaded[in.files[0]], in.files[0]).predictions;
    } else {  // the prediction as the files write it, then the model's own answer
      const TaskEval ev = evaluate_t5(job, in.loaded[in.files[0]], in.files[0]).front();
      for (size_t i = 0; i < ev.predictions.size(); ++i) out.push_back(ev.predictions[i] + "\t" + ev.decoded[i]);
    }
  } catch (const EvaluationStopped&) {
    throw Interrupted(stop_signal(), fmt::format("predict: interrupted by {} while predicting {} line{} of {}; nothing "
                                                 "written", signal_name(stop_signal()), lines.size(),
                                                 lines.size() == 1 ? "" : "s", where));
  }
  return out;
}

}  // namespace thx
