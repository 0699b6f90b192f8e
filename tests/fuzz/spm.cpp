// Fuzz target: a SentencePiece model file, as every command that tokenizes loads it (through
// thx's plugin), then used once to encode and decode.
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
