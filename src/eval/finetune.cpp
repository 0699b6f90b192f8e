#include "eval/finetune.h"

#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "common/error.h"
#include "common/log.h"
#include "common/runtime.h"
#include "eval/finetune_encoder.h"
#include "eval/finetune_t5.h"
#include "distributed/dist.h"
#include "distributed/launch.h"
#include "training/loop.h"
#include "training/run_dir.h"
#include "training/tensorboard.h"

namespace thx {
namespace fs = std::filesystem;

namespace {

// The resolved finetune.yaml of a stored run, as this code reads it (for --resume's check).
std::string normalize_finetune(const std::string& yaml, const std::string& origin) {
  ConfigTree tree;
  tree.merge_text(yaml, origin);
  return cfg::to_yaml(load_config<FinetuneRunConfig>(tree, [](const FinetuneRunConfig&) {}));
}

// The fine-tuned parameters `thx eval --checkpoint` names for a task: the file itself, or in a
// `thx finetune` directory <task>.h5 (BERT/ALBERT, one run per task) or model.h5 (T5's mixture).
std::string finetuned_file(const std::string& checkpoint, const Pretrained& model, const std::string& task) {
  if (!fs::is_directory(checkpoint)) return checkpoint;
  return (fs::path(checkpoint) / (model.config.model.encoder_only() ? task + ".h5" : "model.h5")).string();
}

void prepare_out(const std::string& out) {
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw InputError(fmt::format("{}: cannot create the output directory ({})", out, ec.message()));
}

}  // namespace

bool run_finetune(const FinetuneRunConfig& config, const Pretrained& pretrained, const std::string& out_dir,
                  const FinetuneOptions& options) {
  // Everything that can be checked is checked before the output directory is touched.
  validate(config.finetune);
  if (pretrained.config.model.encoder_only())
    for (const auto& t : config.finetune.tasks)
      THX_CHECK(t != "record", "finetune.tasks: record needs an entity-ranking head, which BERT/ALBERT "
                               "fine-tuning does not have; T5 fine-tunes it as text to text");
  const std::string tokenizer = tokenizer_path(config.finetune, pretrained.config);
  THX_CHECK(fs::is_regular_file(tokenizer), "{}: no such tokenizer model (finetune.tokenizer)", tokenizer);
  for (const auto& t : config.finetune.tasks)
    for (const char* split : {"train", "dev"}) {
      const std::string path = task_path(config.finetune.data, t, split);
      THX_CHECK(fs::exists(path), "{}: not found (task {}, split {}; finetune.data is {})", path, t, split,
                config.finetune.data);
    }
  RunDirOptions ro;
  ro.dir = out_dir, ro.flag = "--out", ro.config_file = "finetune.yaml", ro.yaml = cfg::to_yaml(config);
  ro.resume = options.resume, ro.allow_changes = options.allow_changes, ro.normalize = normalize_finetune;
  ro.checkpoint_dirs.push_back((fs::path(out_dir) / "checkpoints").string());
  for (const auto& t : config.finetune.tasks) {
    ro.checkpoint_dirs.push_back((fs::path(out_dir) / "checkpoints" / t).string());
    ro.results.push_back((fs::path(out_dir) / (t + ".json")).string());
  }
  ro.log_file = "finetune.log";
  {
    resolve_device(device_request(), "--device");
    const std::string e = batch_split_error("finetune.batch_size", config.finetune.batch_size, 1, dist::world_size());
    if (!e.empty()) throw InputError(e);
  }
  // Only rank 0 has the output directory (the others may be on other nodes).
  std::optional<RunDirectory> dir;
  dist::on_rank0([&] { dir.emplace(ro); });
  std::optional<EventWriter> events;
  if (dist::rank() == 0) events.emplace((fs::path(out_dir) / "tb").string());
  if (dir) dir->open();
  const FinetuneJob job{config, pretrained, out_dir, tokenizer, ro.yaml, options.resume, events ? &*events : nullptr};
  return pretrained.config.model.encoder_only() ? finetune_encoder(job) : finetune_t5(job);
}

void run_eval(const FinetuneRunConfig& config, const Pretrained& model, const std::string& checkpoint,
              const std::string& out) {
  // As run_finetune: every input is checked before the output directory is created.
  if (!fs::exists(checkpoint)) throw InputError(fmt::format("{}: no such checkpoint", checkpoint));
  const fs::path beside = fs::is_directory(checkpoint) ? fs::path(checkpoint) : fs::path(checkpoint).parent_path();
  const std::string out_dir = out.empty() ? (beside / "eval").string() : out;
  validate(config.finetune);
  const std::string tokenizer = tokenizer_path(config.finetune, model.config);
  THX_CHECK(fs::is_regular_file(tokenizer), "{}: no such tokenizer model (finetune.tokenizer)", tokenizer);
  for (const auto& t : config.finetune.tasks) {
    const std::string dev = task_path(config.finetune.data, t, "dev");
    THX_CHECK(fs::exists(dev), "{}: not found (task {}, split dev; finetune.data is {})", dev, t, config.finetune.data);
    const std::string file = finetuned_file(checkpoint, model, t);
    THX_CHECK(fs::is_regular_file(file), "{}: no fine-tuned parameters for task {} (--checkpoint)", file, t);
  }
  prepare_out(out_dir);
  const FinetuneJob job{config, model, out_dir, tokenizer, cfg::to_yaml(config), false, nullptr};
  if (model.config.model.encoder_only()) {
    for (const auto& t : config.finetune.tasks) {
      const std::string file = finetuned_file(checkpoint, model, t);
      eval_encoder_task(job, t, load_checkpoint(file), file);
    }
  } else {
    const std::string file = finetuned_file(checkpoint, model, config.finetune.tasks.front());
    eval_t5(job, load_checkpoint(file), file);
  }
}

}  // namespace thx
