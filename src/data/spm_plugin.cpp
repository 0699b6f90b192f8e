// spm_plugin.cpp: SentencePiece behind a C ABI, built as its own shared object.
//
// Debian's libsentencepiece carries its own copy of protobuf and exports its symbols; loaded
// into the same global symbol scope as LibTorch's system protobuf, the two copies
// interpose each other and the process crashes while the libraries initialize. thx therefore
// never links SentencePiece: tokenizer.cpp loads this plugin with dlopen(RTLD_LOCAL |
// RTLD_DEEPBIND), which keeps SentencePiece and its protobuf in a scope of their own
// (sanitizer builds, which refuse DEEPBIND, load it uninstrumented with dlmopen into a
// link-map namespace of its own).
// No torch or thx header here.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

void set_error(char* err, int len, const std::string& msg) {
  if (err && len > 0) {
    std::strncpy(err, msg.c_str(), len - 1);
    err[len - 1] = '\0';
  }
}

class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  VectorIterator(const char* const* s, size_t n) : s_(s), n_(n) {
    if (n_) value_ = s_[0];
  }
  bool done() const override { return i_ >= n_; }
  void Next() override {
    if (++i_ < n_) value_ = s_[i_];
  }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const char* const* s_;
  size_t n_, i_ = 0;
  std::string value_;
};

}  // namespace

extern "C" {

void* thx_spm_load(const char* path, char* err, int errlen) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  const auto status = sp->Load(path);
  if (!status.ok()) {
    set_error(err, errlen, status.ToString());
    delete sp;
    return nullptr;
  }
  return sp;
}

void thx_spm_unload(void* h) { delete static_cast<sentencepiece::SentencePieceProcessor*>(h); }

// pieces, pad, eos, unk
void thx_spm_info(void* h, int* out4) {
  auto* sp = static_cast<sentencepiece::SentencePieceProcessor*>(h);
  out4[0] = sp->GetPieceSize(), out4[1] = sp->pad_id(), out4[2] = sp->eos_id(), out4[3] = sp->unk_id();
}

// Returns the number of ids written to *ids (malloc'ed; free with thx_spm_free).
size_t thx_spm_encode(void* h, const char* text, size_t len, int** ids) {
  std::vector<int> v;
  static_cast<sentencepiece::SentencePieceProcessor*>(h)->Encode(std::string(text, len), &v).IgnoreError();
  *ids = static_cast<int*>(std::malloc(sizeof(int) * (v.empty() ? 1 : v.size())));
  std::copy(v.begin(), v.end(), *ids);
  return v.size();
}

// Returns a malloc'ed, NUL-terminated string (free with thx_spm_free).
char* thx_spm_decode(void* h, const int* ids, size_t n) {
  std::string s;
  static_cast<sentencepiece::SentencePieceProcessor*>(h)->Decode(std::vector<int>(ids, ids + n), &s).IgnoreError();
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

void thx_spm_free(void* p) { std::free(p); }

// The piece of one id, as a malloc'ed NUL-terminated string (free with thx_spm_free).
char* thx_spm_piece(void* h, int id) {
  const std::string& s = static_cast<sentencepiece::SentencePieceProcessor*>(h)->IdToPiece(id);
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

// Trains with key=value arguments on the given sentences. Returns 0 on success.
int thx_spm_train(const char* const* keys, const char* const* values, int nargs,
                  const char* const* sentences, size_t nsentences, char* err, int errlen) {
  std::unordered_map<std::string, std::string> args;
  for (int i = 0; i < nargs; ++i) args[keys[i]] = values[i];
  VectorIterator it(sentences, nsentences);
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &it);
  if (!status.ok()) {
    set_error(err, errlen, status.ToString());
    return 1;
  }
  return 0;
}

}  // extern "C"
