#include "data/prepare.h"

#include <map>
#include <optional>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cerrno>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"
#include "common/fs.h"
#include "common/h5.h"
#include "common/log.h"
#include "common/parallel.h"
#include "common/runtime.h"
#include "common/signals.h"
#include "data/tokenizer.h"

namespace thx {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kVersion = 1;
const char* kSplits[2] = {"train", "heldout"};

std::string fingerprint(const PrepareOptions& o, const std::vector<std::string>& files,
                        const std::vector<std::string>& heldout) {
  json j;
  j["version"] = kVersion;
  for (const auto& f : files) j["inputs"].push_back({f, file_stamp(f)});
  j["heldout_files"] = heldout;
  j["heldout_fraction"] = o.heldout_files.empty() ? o.heldout_fraction : 0.0;
  j["format"] = corpus_format_name(o.format);
  for (const auto& spec : o.inputs)  // per-input formats ("books:DIR")
    if (split_format_prefix(spec).first) j["formats"].push_back(spec);
  j["tokenizer"] = {fs::absolute(o.tokenizer).string(), file_stamp(o.tokenizer)};
  j["shard_tokens"] = o.shard_tokens;
  return fmt::format("{:016x}", fnv1a(j.dump()));
}

// Accumulates documents of one split and writes a shard whenever it is full.
struct ShardWriter {
  ShardWriter(std::string d, std::string s, int64_t n) : dir(std::move(d)), split(std::move(s)), shard_tokens(n) {}
  std::string dir, split;
  int64_t shard_tokens;
  std::vector<int32_t> tokens;
  std::vector<int64_t> offsets{0};
  std::vector<std::string> shards;
  int64_t documents = 0, total_tokens = 0;

  void add(const std::vector<int32_t>& doc) {
    if (doc.empty()) return;
    tokens.insert(tokens.end(), doc.begin(), doc.end());
    offsets.push_back(int64_t(tokens.size()));
    ++documents, total_tokens += int64_t(doc.size());
    if (int64_t(tokens.size()) >= shard_tokens) flush();
  }
  void flush() {
    if (offsets.size() < 2) return;
    const std::string name = fmt::format("{}-{:05d}.h5", split, shards.size());
    H5Writer w((fs::path(dir) / name).string());
    w.write("/tokens", torch::from_blob(tokens.data(), {int64_t(tokens.size())}, torch::kInt32), 1);
    w.write("/doc_offsets", torch::from_blob(offsets.data(), {int64_t(offsets.size())}, torch::kInt64), 1);
    w.attr("/", "split", split);
    w.commit();
    shards.push_back(name);
    tokens.clear();
    offsets.assign(1, 0);
  }
};

// The input files (globs expanded, sorted; held-out files added), the held-out files, and the
// format of each file named under a FORMAT: prefix.
struct Inputs {
  std::vector<std::string> files, heldout;
  std::set<std::string> heldout_set;
  std::map<std::string, CorpusFormat> format;
};

// A path made absolute and normal, links resolved where they exist.
fs::path resolved_path(const std::string& path) {
  std::error_code ec;
  return fs::weakly_canonical(fs::absolute(path), ec);
}

// Whether `file` lies inside the folder `d` (resolved).
bool inside(const std::string& file, const fs::path& d) {
  const fs::path f = resolved_path(file);
  auto di = d.begin(), fi = f.begin();
  for (; di != d.end() && !di->empty(); ++di, ++fi)  // (a trailing separator is an empty last part)
    if (fi == f.end() || *fi != *di) return false;
  return fi != f.end();
}

// Whether `file` is the tokenizer model or the .vocab that spm-train wrote beside it.
bool tokenizer_file(const std::string& file, const std::string& tokenizer) {
  std::error_code ec;
  for (const fs::path& t : {fs::path(tokenizer), fs::path(tokenizer).replace_extension(".vocab")})
    if (fs::equivalent(file, t, ec)) return true;
  return false;
}

// The files of `specs`, less prepare's own: those inside --out (with the output folder inside an
// input folder, a re-run would read its own shards and manifest as text, and find the inputs
// changed), and the tokenizer's (its lines would be documents).
std::vector<std::string> input_files(const std::vector<std::string>& specs, const PrepareOptions& o,
                                     std::set<std::string>* left_out) {
  std::vector<std::string> files;
  const fs::path out = resolved_path(o.out_dir);
  for (auto& f : expand_inputs(specs))
    if (inside(f, out) || tokenizer_file(f, o.tokenizer)) left_out->insert(f);
    else files.push_back(std::move(f));
  return files;
}

Inputs list_inputs(const PrepareOptions& o) {
  Inputs in;
  std::vector<std::string> paths;
  std::set<std::string> left_out;
  for (const auto& spec : o.inputs) {
    const auto [format, path] = split_format_prefix(spec);
    paths.push_back(path);
    if (format)
      for (const auto& f : input_files({path}, o, &left_out)) in.format[f] = *format;
  }
  in.files = input_files(paths, o, &left_out);
  if (!o.heldout_files.empty())
    for (const auto& f : input_files(o.heldout_files, o, &left_out)) in.heldout_set.insert(f);
  if (!left_out.empty())
    thx::log("prepare")->info("left out {} file{} that are the tokenizer's or inside --out: {}{}", left_out.size(),
                              left_out.size() == 1 ? "" : "s", *left_out.begin(), left_out.size() > 1 ? ", ..." : "");
  in.heldout.assign(in.heldout_set.begin(), in.heldout_set.end());
  for (const auto& f : in.heldout)  // held-out files need not be listed among the inputs
    if (std::find(in.files.begin(), in.files.end(), f) == in.files.end()) in.files.push_back(f);
  std::sort(in.files.begin(), in.files.end());
  return in;
}

// The result of an earlier prepare of the same inputs whose shards are all there, or nullopt
// (nothing there, or a damaged manifest: rebuilt). Shards made from other inputs are refused:
// runs and checkpoints refer to them.
std::optional<PrepareResult> up_to_date(const PrepareOptions& o, const std::string& fp) {
  const fs::path manifest_path = fs::path(o.out_dir) / "manifest.json";
  if (!fs::exists(manifest_path)) return std::nullopt;
  try {
    const json m = json::parse(thx::read_file(manifest_path.string()));
    bool complete = m.value("fingerprint", "") == fp;
    for (const char* s : kSplits)
      for (const auto& sh : m["splits"][s]["shards"])
        complete = complete && fs::exists(fs::path(o.out_dir) / sh.get<std::string>());
    if (m.value("fingerprint", "") != fp && !m.value("fingerprint", "").empty())
      throw InputError(fmt::format(
          "--out {}: holds shards prepared from other inputs or settings (see its "
          "manifest.json); choose another --out, or remove the directory to rebuild",
          o.out_dir));
    if (!complete) return std::nullopt;
    PrepareResult result;
    result.up_to_date = true;
    for (int s = 0; s < 2; ++s) {
      result.documents[s] = m["splits"][kSplits[s]]["documents"];
      result.tokens[s] = m["splits"][kSplits[s]]["tokens"];
    }
    return result;
  } catch (const json::exception&) {
    return std::nullopt;  // a damaged manifest is rebuilt
  }
}

// A signal stopped the tokenizing: how far it had come (bytes of the files done, documents read).
struct Stopped {
  int64_t bytes, total_bytes, documents;
};

// Every input document tokenized (in parallel, in batches, appended in order) into the train
// or held-out shards; progress every 2 s. Stopped where a signal asked (common/signals.h).
void tokenize_all(const PrepareOptions& o, const Inputs& in, const Tokenizer& tok, ShardWriter (&writers)[2],
                  PrepareResult& result) {
  auto log = thx::log("prepare");
  int64_t total_bytes = 0;
  for (const auto& f : in.files) total_bytes += int64_t(fs::file_size(f));
  log->info("tokenizing {} files ({:.1f} MB) with {} into {}", in.files.size(), total_bytes / 1e6, o.tokenizer,
            o.out_dir);
  std::vector<std::string> batch;
  std::vector<int> batch_split;
  const auto t0 = std::chrono::steady_clock::now();
  auto last_report = t0;
  int64_t docs = 0;
  auto flush_batch = [&] {
    std::vector<std::vector<int32_t>> ids(batch.size());
    thx::parallel_for(0, int64_t(batch.size()), 16, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) ids[i] = tok.encode(batch[i]);
    });
    for (size_t i = 0; i < batch.size(); ++i) writers[batch_split[i]].add(ids[i]);
    docs += int64_t(batch.size());
    batch.clear(), batch_split.clear();
  };
  for (const auto& f : in.files) {
    const int file_split = in.heldout_set.count(f) ? 1 : 0;
    CorpusStats file_stats;
    const auto ff = in.format.find(f);
    read_corpus({f}, ff != in.format.end() ? ff->second : o.format, [&](std::string&& doc) {
      if (stop_signal() != 0) throw Stopped{result.stats.bytes, total_bytes, docs + int64_t(batch.size())};
      int s = file_split;
      if (in.heldout.empty())  // by fraction, from the text itself
        s = double(fnv1a(doc) >> 11) * 0x1.0p-53 < o.heldout_fraction ? 1 : 0;
      batch.push_back(std::move(doc));
      batch_split.push_back(s);
      if (batch.size() >= 1024) flush_batch();
    }, file_stats, {});
    result.stats.files += file_stats.files, result.stats.documents += file_stats.documents;
    result.stats.bytes += file_stats.bytes, result.stats.bad_lines += file_stats.bad_lines;
    for (const auto& e : file_stats.bad_examples)
      if (result.stats.bad_examples.size() < 5) result.stats.bad_examples.push_back(e);
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_report).count() > 2.0) {
      const double secs = std::chrono::duration<double>(now - t0).count();
      const double rate = result.stats.bytes / std::max(secs, 1e-9);
      log->info("{:.0f}% of {:.1f} MB, {} docs, {:.0f} docs/s, ETA {:.0f}s",
                100.0 * result.stats.bytes / std::max<int64_t>(total_bytes, 1), total_bytes / 1e6,
                docs + int64_t(batch.size()), (docs + batch.size()) / std::max(secs, 1e-9),
                (total_bytes - result.stats.bytes) / std::max(rate, 1.0));
      last_report = now;
    }
  }
  flush_batch();
}

// manifest.json: what the shards were made from and hold.
void write_manifest(const PrepareOptions& o, const Inputs& in, const Tokenizer& tok, const std::string& fp,
                    const ShardWriter (&writers)[2], PrepareResult& result) {
  json m;
  m["thx_prepare"] = kVersion;
  m["fingerprint"] = fp;
  m["format"] = corpus_format_name(o.format);
  m["tokenizer"] = {{"path", fs::absolute(o.tokenizer).string()}, {"pieces", tok.pieces()},
                    {"vocab_size", tok.vocab_size()},
                    {"convention", convention_name(tok.convention())}};
  for (const auto& f : in.files) m["inputs"].push_back({{"path", f}, {"stamp", file_stamp(f)}});
  m["heldout"] = in.heldout.empty() ? json{{"fraction", o.heldout_fraction}} : json{{"files", in.heldout}};
  m["bad_lines"] = result.stats.bad_lines;
  m["bad_examples"] = result.stats.bad_examples;
  for (int s = 0; s < 2; ++s) {
    m["splits"][kSplits[s]] = {{"shards", writers[s].shards},
                               {"documents", writers[s].documents},
                               {"tokens", writers[s].total_tokens}};
    result.documents[s] = writers[s].documents, result.tokens[s] = writers[s].total_tokens;
  }
  write_file_atomic((fs::path(o.out_dir) / "manifest.json").string(), m.dump(2) + "\n");
}

// A directory this run creates is removed again if the run fails (an empty corpus, one whose
// every line is malformed, a full disk): a failed prepare leaves nothing behind.
struct RemoveIfFailed {
  std::string dir;
  int exceptions = std::uncaught_exceptions();
  ~RemoveIfFailed() {
    if (!dir.empty() && std::uncaught_exceptions() > exceptions) remove_tree(dir);
  }
};

// In a directory that was there before, the shards this run wrote (and, of one it was writing,
// its temporary file: H5Writer's own) are removed if it fails.
struct RemoveShardsIfFailed {
  const ShardWriter (&writers)[2];
  int exceptions = std::uncaught_exceptions();
  ~RemoveShardsIfFailed() {
    if (std::uncaught_exceptions() <= exceptions) return;
    std::error_code ec;
    for (const ShardWriter& w : writers)
      for (const std::string& name : w.shards) fs::remove(fs::path(w.dir) / name, ec);
  }
};

// One prepare at a time in a folder: two would write each other's shards under one manifest.
struct DirectoryLock {
  explicit DirectoryLock(const std::string& dir) : fd(try_lock_directory(dir)) {
    if (fd < 0)
      throw InputError(fmt::format("--out {}: another thx prepare{} is writing this folder; wait for it to end",
                                   dir, lock_holder(dir)));
  }
  ~DirectoryLock() { ::close(fd); }
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;
  int fd;
};

// A shard's temporary file (<split>-<k>.h5.tmp-<pid>) whose process is gone was left by a prepare
// killed while writing it (SIGKILL, or a second signal): removed, said once. A live one's stays.
void remove_dead_temporaries(const std::string& dir) {
  int64_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const size_t at = name.find(".h5.tmp-");
    if (!e.is_regular_file() || at == std::string::npos) continue;
    const std::string pid = name.substr(at + 8);
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
    if (::kill(pid_t(std::stol(pid)), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    std::error_code ec;
    files += fs::remove(e.path(), ec);
  }
  if (files > 0)
    thx::log("prepare")->warn("{}: removed {} unfinished shard file{} left by a killed prepare", dir, files,
                              files == 1 ? "" : "s");
}

// SIGINT or SIGTERM stopped the run (`at`): the one line of what it did and what it left.
Interrupted interrupted(const Stopped& at, const PrepareOptions& o, bool own_dir) {
  return Interrupted(stop_signal(),
                     fmt::format("prepare: interrupted by {} at {:.0f}% of {:.1f} MB ({} documents read); nothing "
                                 "kept: {}", signal_name(stop_signal()),
                                 100.0 * double(at.bytes) / double(std::max<int64_t>(at.total_bytes, 1)),
                                 double(at.total_bytes) / 1e6, format_count(at.documents),
                                 own_dir ? o.out_dir + " removed" : "the shards it wrote removed from " + o.out_dir));
}

}  // namespace

PrepareResult run_prepare(const PrepareOptions& o) {
  auto log = thx::log("prepare");
  THX_CHECK(!o.out_dir.empty(), "prepare: --out DIR is required");
  check_output_dir(o.out_dir, "--out");
  THX_CHECK(o.heldout_fraction >= 0 && o.heldout_fraction < 1,
            "--heldout-fraction {}: must be in [0, 1)", o.heldout_fraction);
  THX_CHECK(o.shard_tokens >= 1024, "--shard-tokens {}: must be at least 1024", o.shard_tokens);
  const Inputs in = list_inputs(o);
  const Tokenizer tok(o.tokenizer);
  const std::string fp = fingerprint(o, in.files, in.heldout);
  if (const auto done = up_to_date(o, fp)) {
    log->info("{} is up to date with its inputs; nothing to do", o.out_dir);
    return *done;
  }
  const bool own_dir = !fs::exists(o.out_dir);
  const RemoveIfFailed cleanup{own_dir ? o.out_dir : ""};
  const SignalScope signals;  // from before the folder is made: a signal is honoured at the first document
  create_output_dir(o.out_dir, "--out");
  const DirectoryLock lock(o.out_dir);
  if (!own_dir) remove_dead_temporaries(o.out_dir);
  const auto t0 = std::chrono::steady_clock::now();
  ShardWriter writers[2] = {ShardWriter(o.out_dir, "train", o.shard_tokens),
                            ShardWriter(o.out_dir, "heldout", o.shard_tokens)};
  const RemoveShardsIfFailed shards_cleanup{writers};
  PrepareResult result;
  try {
    tokenize_all(o, in, tok, writers, result);
  } catch (const Stopped& at) {
    throw interrupted(at, o, own_dir);
  }
  if (result.stats.documents == 0)
    throw InputError(fmt::format("prepare: no usable document in {} files ({} malformed lines)",
                                 in.files.size(), result.stats.bad_lines));
  for (auto& w : writers) w.flush();
  if (writers[0].documents == 0)
    throw InputError("prepare: every document went to the held-out split; lower "
                     "--heldout-fraction or hold out fewer files");
  // thx pretrain evaluates on the held-out split and refuses data without one: say so here. A
  // fraction asked for and none held out is refused; --heldout-fraction 0 is a choice, and warned
  // of. (The --heldout files, each read on its own, are refused above where they hold no document.)
  if (writers[1].documents == 0 && o.heldout_fraction > 0)
    throw InputError(fmt::format("prepare: no document went to the held-out split (--heldout-fraction {} of {} "
                                 "document{}), which thx pretrain evaluates on; raise --heldout-fraction, or hold out "
                                 "files with --heldout", o.heldout_fraction, result.stats.documents,
                                 result.stats.documents == 1 ? "" : "s"));
  if (writers[1].documents == 0)
    log->warn("{}: --heldout-fraction 0 and no --heldout files: no held-out split, which thx pretrain needs",
              o.out_dir);
  if (stop_signal() != 0)  // while the last shards were written: not done, so nothing kept
    throw interrupted({result.stats.bytes, result.stats.bytes, result.stats.documents}, o, own_dir);
  write_manifest(o, in, tok, fp, writers, result);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log->info("train: {} docs, {} tokens; heldout: {} docs, {} tokens; {} malformed lines; {:.1f}s",
            result.documents[0], result.tokens[0], result.documents[1], result.tokens[1],
            result.stats.bad_lines, secs);
  for (const auto& e : result.stats.bad_examples) log->warn("skipped {}", e);
  return result;
}

std::string prepare_command(const std::string& dir) {
  const fs::path p = fs::path(dir).lexically_normal();
  const std::string name = (p.has_filename() ? p : p.parent_path()).filename().string();
  for (const char* shipped : {"quickstart", "enwiki", "wiki-books-albert"})
    if (name == shipped) return "scripts/prepare_data.sh " + name;
  return "thx prepare --input ... --tokenizer ... --out " + dir;
}

void require_prepared_convention(const std::string& prepared, const std::string& have, const std::string& want) {
  if (have == want) return;
  const bool t5 = want == "t5";
  throw ConfigError("data.prepared",
                    fmt::format("{}: tokenized with {} ids; {} need{} {}'s ({}): train one with `thx spm-train "
                                "--convention {}` and run `thx prepare` with it",
                                prepared, have, t5 ? "T5" : "BERT and ALBERT", t5 ? "s" : "", t5 ? "T5" : "ALBERT",
                                t5 ? "eos 1 and 100 sentinels" : "[CLS] 2, [SEP] 3, [MASK] 4", want));
}

TokenCorpus load_split(const std::string& dir, const std::string& split) {
  const fs::path manifest_path = fs::path(dir) / "manifest.json";
  if (!fs::exists(manifest_path)) {
    const std::string cmd = prepare_command(dir);
    throw InputError(fmt::format("{}: no manifest.json; run `thx prepare` first{}", dir,
                                 cmd.rfind("scripts/", 0) == 0 ? " (this shipped data set: " + cmd + ")" : ""));
  }
  json m;
  try {
    m = json::parse(read_file(manifest_path.string()));
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON ({})", manifest_path.string(), e.what()));
  }
  const std::string mp = manifest_path.string();
  if (!m.is_object() || !m.contains("splits") || !m["splits"].is_object() || !m["splits"].contains(split))
    throw InputError(fmt::format("{}: no split '{}'", mp, split));
  TokenCorpus c;
  c.offsets = {0};
  std::vector<std::string> shards;
  try {  // a field of the wrong type is one line naming the manifest
    const json tok = m.value("tokenizer", json::object());
    if (!tok.is_object()) throw InputError(fmt::format("{}: 'tokenizer' is not an object", mp));
    c.vocab_size = tok.value("vocab_size", int64_t(0));
    c.tokenizer = tok.value("path", "");
    c.convention = tok.value("convention", "t5");
    const json& sp = m["splits"][split];
    if (!sp.is_object() || !sp.contains("shards") || !sp["shards"].is_array())
      throw InputError(fmt::format("{}: split '{}' has no 'shards' list", mp, split));
    for (const auto& name : sp["shards"]) shards.push_back(name.get<std::string>());
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: a field has the wrong type ({})", mp, e.what()));
  }
  THX_CHECK(c.vocab_size >= 0, "{}: tokenizer.vocab_size {} is negative", mp, c.vocab_size);
  for (const auto& name : shards) {
    THX_CHECK(!name.empty() && fs::path(name).filename() == name,
              "{}: shard name '{}' is not a file name inside the directory", mp, name);
    const std::string path = (fs::path(dir) / name).string();
    H5Reader r(path);
    const torch::Tensor t = r.read("/tokens"), off = r.read("/doc_offsets");
    if (t.scalar_type() != torch::kInt32 || t.dim() != 1 || off.scalar_type() != torch::kInt64 || off.dim() != 1 ||
        off.size(0) < 2 || off[-1].item<int64_t>() != t.numel() || off[0].item<int64_t>() != 0)
      throw InputError(fmt::format("{}: inconsistent /tokens and /doc_offsets", path));
    const int64_t base = int64_t(c.tokens.size());
    c.tokens.insert(c.tokens.end(), t.data_ptr<int32_t>(), t.data_ptr<int32_t>() + t.numel());
    const int64_t* o = off.data_ptr<int64_t>();
    for (int64_t i = 1; i < off.size(0); ++i) {
      THX_CHECK(o[i] > o[i - 1], "{}: /doc_offsets is not increasing at document {}", path, i - 1);
      c.offsets.push_back(base + o[i]);
    }
  }
  if (c.documents() == 0) throw InputError(fmt::format("{}: split '{}' is empty", dir, split));
  for (int32_t t : c.tokens)
    if (t < 0 || (c.vocab_size > 0 && t >= c.vocab_size))
      throw InputError(fmt::format("{}: token id {} outside the vocabulary ({})", dir, t, c.vocab_size));
  return c;
}

}  // namespace thx
