#include "data/tokenizer.h"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <regex>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/runtime.h"
#include "common/signals.h"

namespace thx {

namespace {

// The SentencePiece plugin (spm_plugin.cpp), loaded once in a symbol scope of its own.
struct Spm {
  void* (*load)(const char*, char*, int);
  void (*unload)(void*);
  void (*info)(void*, int*);
  size_t (*encode)(void*, const char*, size_t, int**);
  char* (*decode)(void*, const int*, size_t);
  void (*free)(void*);
  char* (*piece)(void*, int);
  int (*train)(const char* const*, const char* const*, int, const char* const*, size_t, char*, int);
};

std::string plugin_path() {
  if (const char* env = std::getenv("THX_SPM_PLUGIN")) return env;
  // Beside the running binary (the thx build directory), else where CMake built it.
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    const auto beside = std::filesystem::path(exe).parent_path() / "libthx_spm.so";
    if (std::filesystem::exists(beside)) return beside.string();
  }
  return THX_SPM_PLUGIN;
}

const Spm& spm() {
  static const Spm s = [] {
    const std::string path = plugin_path();
#ifdef THX_SPM_OWN_NAMESPACE  // sanitizer builds (CMakeLists.txt): they refuse RTLD_DEEPBIND
    void* h = ::dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
#else
    void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
#endif
    if (!h) throw std::runtime_error(fmt::format("cannot load the SentencePiece plugin: {}", ::dlerror()));
    auto sym = [&](const char* name) {
      void* f = ::dlsym(h, name);
      if (!f) throw std::runtime_error(fmt::format("{}: no symbol {}", path, name));
      return f;
    };
    Spm r;
    r.load = reinterpret_cast<decltype(r.load)>(sym("thx_spm_load"));
    r.unload = reinterpret_cast<decltype(r.unload)>(sym("thx_spm_unload"));
    r.info = reinterpret_cast<decltype(r.info)>(sym("thx_spm_info"));
    r.encode = reinterpret_cast<decltype(r.encode)>(sym("thx_spm_encode"));
    r.decode = reinterpret_cast<decltype(r.decode)>(sym("thx_spm_decode"));
    r.free = reinterpret_cast<decltype(r.free)>(sym("thx_spm_free"));
    r.train = reinterpret_cast<decltype(r.train)>(sym("thx_spm_train"));
    r.piece = reinterpret_cast<decltype(r.piece)>(sym("thx_spm_piece"));
    return r;
  }();
  return s;
}

}  // namespace

Tokenizer::Tokenizer(const std::string& model_path) : path_(model_path) {
  if (!std::filesystem::is_regular_file(model_path))
    throw InputError(fmt::format("{}: no such SentencePiece model file", model_path));
  char err[512] = {0};
  handle_ = spm().load(model_path.c_str(), err, sizeof err);
  if (!handle_) throw InputError(fmt::format("{}: not a SentencePiece model ({})", model_path, err));
  int info[4];
  spm().info(handle_, info);
  pieces_ = info[0];
  if (info[1] == kPad && info[2] == kEos && info[3] == kUnk) {
    convention_ = TokenizerConvention::t5;
  } else if (info[1] == kPad && info[2] < 0 && info[3] == kAlbertUnk && pieces_ > kMask &&
             piece(kCls) == "[CLS]" && piece(kSep) == "[SEP]" && piece(kMask) == "[MASK]") {
    convention_ = TokenizerConvention::albert;
  } else {
    spm().unload(handle_);
    throw InputError(fmt::format(
        "{}: pad/eos/unk ids are {}/{}/{}; thx needs T5's 0/1/2, or ALBERT's pad 0, unk 1, [CLS] 2, "
        "[SEP] 3, [MASK] 4 (train one with `thx spm-train --convention t5|albert`)",
        model_path, info[1], info[2], info[3]));
  }
}

std::string Tokenizer::piece(int32_t id) const {
  char* s = spm().piece(handle_, id);
  std::string out(s);
  spm().free(s);
  return out;
}

std::vector<uint8_t> Tokenizer::word_starts() const {
  std::vector<uint8_t> out(size_t(vocab_size()), 0);
  const std::string mark = "\xe2\x96\x81";  // U+2581
  const int32_t first = convention_ == TokenizerConvention::t5 ? kUnk + 1 : kMask + 1;
  for (int32_t id = first; id < pieces_; ++id) out[size_t(id)] = piece(id).rfind(mark, 0) == 0;
  return out;
}

const char* convention_name(TokenizerConvention c) {
  return c == TokenizerConvention::t5 ? "t5" : "albert";
}

void require_convention(const Tokenizer& tok, TokenizerConvention want, const std::string& path,
                        const std::string& who) {
  if (tok.convention() == want) return;
  const bool t5 = want == TokenizerConvention::t5;
  throw InputError(fmt::format("{}: {} tokenizer; {} needs {} (`thx spm-train --convention {}`)", path,
                               t5 ? "an ALBERT-convention" : "a T5-convention", who,
                               t5 ? "T5's ids, eos 1 and 100 sentinels" : "[CLS]/[SEP] ids", convention_name(want)));
}

TokenizerConvention parse_convention(const std::string& s, const std::string& what) {
  if (s == "t5") return TokenizerConvention::t5;
  if (s == "albert") return TokenizerConvention::albert;
  throw InputError(fmt::format("{} '{}' is invalid: t5 | albert", what, s));
}

Tokenizer::~Tokenizer() {
  if (handle_) spm().unload(handle_);
}

std::vector<int32_t> Tokenizer::encode(const std::string& text) const {
  int* ids = nullptr;
  const size_t n = spm().encode(handle_, text.data(), text.size(), &ids);
  std::vector<int32_t> out(ids, ids + n);
  spm().free(ids);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  std::vector<int> run;
  auto flush = [&] {
    if (run.empty()) return;
    char* s = spm().decode(handle_, run.data(), run.size());
    out += s;
    spm().free(s);
    run.clear();
  };
  for (int32_t id : ids) {
    if (id == kPad || (convention_ == TokenizerConvention::t5 && id == kEos)) continue;
    if (id >= pieces_ && id < vocab_size()) {
      flush();
      out += fmt::format("<extra_id_{}>", vocab_size() - 1 - id);
    } else if (id >= 0 && id < pieces_) {
      run.push_back(id);
    }
  }
  flush();
  return out;
}

CorpusStats train_sentencepiece(const SpmTrainOptions& o) {
  auto log = thx::log("spm");
  if (o.pieces < 8) throw InputError(fmt::format("--pieces {}: must be at least 8", o.pieces));
  if (o.model_prefix.empty()) throw InputError("spm-train: --out PREFIX is required");
  // Check the destination before reading any corpus: training can take minutes. An existing
  // model is never replaced (runs and shards were made with it).
  namespace fs = std::filesystem;
  const fs::path model_file = o.model_prefix + ".model";
  check_output_file(o.model_prefix, "--out");  // its folder exists and may be written in; not a folder itself
  if (fs::exists(model_file))
    throw InputError(fmt::format("--out {}: {} exists; remove it or choose another prefix",
                                 o.model_prefix, model_file.string()));
  const auto files = expand_inputs(o.inputs);
  const StopNote note(fmt::format(" while it read the corpus or trained SentencePiece, before it wrote {}",
                                  model_file.string()));
  // Reservoir-sample lines, so that memory stays bounded on any corpus.
  std::vector<std::string> sample;
  std::mt19937_64 rng(o.seed);
  int64_t seen = 0;
  CorpusStats stats;
  read_corpus(files, o.format, [&](std::string&& doc) {
    std::stringstream ss(doc);
    for (std::string line; std::getline(ss, line);) {
      if (line.empty()) continue;
      ++seen;
      if (int64_t(sample.size()) < o.max_sentences) sample.push_back(std::move(line));
      else {
        const int64_t j = std::uniform_int_distribution<int64_t>(0, seen - 1)(rng);
        if (j < o.max_sentences) sample[j] = std::move(line);
      }
    }
  }, stats);
  log->info("{} files, {} documents, {} lines ({} sampled), {} malformed lines skipped",
            stats.files, stats.documents, seen, sample.size(), stats.bad_lines);
  const int64_t threads = o.threads > 0 ? o.threads : available_cores();
  // SentencePiece writes PREFIX.model and PREFIX.vocab in place; train under a temporary
  // prefix and rename, so that an interrupted run leaves no half-written model behind.
  const std::string tmp_prefix = fmt::format("{}.tmp{}", o.model_prefix, getpid());
  const std::unordered_map<std::string, std::string> args = {
      {"model_prefix", tmp_prefix},
      {"model_type", "unigram"},
      {"vocab_size", std::to_string(o.pieces)},
      {"bos_id", "-1"},
      {"character_coverage", fmt::format("{}", o.character_coverage)},
      {"num_threads", std::to_string(threads)},
      {"input_sentence_size", std::to_string(o.max_sentences)},
      {"shuffle_input_sentence", "false"},  // already sampled, with our seed
      {"minloglevel", "2"},
  };
  auto all = args;
  if (o.convention == TokenizerConvention::t5) {
    all.insert({{"pad_id", "0"}, {"eos_id", "1"}, {"unk_id", "2"}});
  } else {
    all.insert({{"pad_id", "0"}, {"unk_id", "1"}, {"eos_id", "-1"},
                {"control_symbols", "[CLS],[SEP],[MASK]"}});
  }
  std::vector<const char*> keys, values, sentences;
  for (const auto& [k, v] : all) keys.push_back(k.c_str()), values.push_back(v.c_str());
  for (const auto& s : sample) sentences.push_back(s.c_str());
  char err[1024] = {0};
  if (spm().train(keys.data(), values.data(), int(keys.size()), sentences.data(), sentences.size(),
                  err, sizeof err) != 0) {
    std::error_code ec;
    fs::remove(tmp_prefix + ".model", ec), fs::remove(tmp_prefix + ".vocab", ec);
    // Keep SentencePiece's message, without its "Internal: file.cc(660) [condition] " prefix.
    std::string msg = std::regex_replace(std::string(err), std::regex(R"(^\w+: \S+\(\d+\) \[.*?\] )"), "");
    throw InputError(fmt::format("spm-train: SentencePiece could not train: {}", msg));
  }
  fs::rename(tmp_prefix + ".vocab", o.model_prefix + ".vocab");
  fs::rename(tmp_prefix + ".model", model_file);
  if (o.convention == TokenizerConvention::t5)
    log->info("wrote {}.model ({} pieces + {} sentinels, T5 ids)", o.model_prefix, o.pieces,
              Tokenizer::kSentinels);
  else
    log->info("wrote {}.model ({} pieces, ALBERT ids)", o.model_prefix, o.pieces);
  return stats;
}

}  // namespace thx
