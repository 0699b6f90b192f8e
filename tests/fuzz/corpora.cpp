// Fuzz target: the corpus readers of `thx prepare` and `thx spm-train`. The first byte picks the
// format (text, text_files, wikiextractor, jsonl, books); the rest is the file.
#include "fuzz.h"

#include "data/corpus.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  thx::fuzz::quiet();
  if (size == 0) return 0;
  using F = thx::CorpusFormat;
  const F formats[] = {F::text, F::text_files, F::wikiextractor, F::jsonl, F::books, F::auto_detect};
  const F format = formats[data[0] % 6];
  const std::string path = thx::fuzz::put(format == F::jsonl ? "corpora/c.jsonl" : "corpora/c.txt", data + 1, size - 1);
  thx::fuzz::clear_errors_only([&] {
    thx::CorpusStats stats;
    size_t bytes = 0;
    thx::read_corpus({path}, format, [&](std::string&& doc) { bytes += doc.size(); }, stats);
    if (bytes > size * 4 + 1024) {  // a document never grows much beyond its input
      std::fprintf(stderr, "FINDING: %zu bytes of documents from %zu bytes of input\n", bytes, size);
      std::abort();
    }
  });
  return 0;
}
