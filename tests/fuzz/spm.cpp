// Fuzz target: a SentencePiece model file, loaded and used once to encode and decode.
//
// In the test suite's replay it goes through thx's Tokenizer (the plugin, dlopen'ed, and the id
// conventions checked). Under libFuzzer it calls the plugin's C functions linked in directly,
// without LibTorch: AddressSanitizer cannot dlopen with RTLD_DEEPBIND, and without DEEPBIND
// SentencePiece's copy of protobuf collides with LibTorch's (src/data/spm_plugin.cpp).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#ifdef THX_FUZZ_SPM_PLUGIN
#include <unistd.h>

extern "C" {
void* thx_spm_load(const char* path, char* err, int errlen);
void thx_spm_unload(void* h);
void thx_spm_info(void* h, int* out4);
size_t thx_spm_encode(void* h, const char* text, size_t len, int** ids);
char* thx_spm_decode(void* h, const int* ids, size_t n);
void thx_spm_free(void* p);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/dev/shm/thx-fuzz-spm-" + std::to_string(::getpid()) + ".model";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  char err[512];
  void* h = thx_spm_load(path.c_str(), err, sizeof err);
  std::remove(path.c_str());
  if (!h) return 0;
  int info[4];
  thx_spm_info(h, info);
  const std::string text = "Talking-heads attention, ünïcödé and 2020.";
  int* ids = nullptr;
  const size_t n = thx_spm_encode(h, text.data(), text.size(), &ids);
  thx_spm_free(thx_spm_decode(h, ids, n));
  thx_spm_free(ids);
  thx_spm_unload(h);
  return 0;
}

#else
#include "fuzz.h"

#include "data/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  thx::fuzz::quiet();
  const std::string path = thx::fuzz::put("spm/m.model", data, size);
  thx::fuzz::clear_errors_only([&] {
    const thx::Tokenizer tok(path);
    const auto ids = tok.encode("Talking-heads attention, ünïcödé and 2020.");
    tok.decode(ids);
  });
  return 0;
}
#endif
