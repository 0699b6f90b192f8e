// corpus.h: documents from text corpora in their public formats.
//
// Formats:
//   text           documents separated by blank lines
//   text_files     one document per file
//   wikiextractor  <doc id=.. url=.. title=..> ... </doc> blocks (first line: the title)
//   jsonl          one JSON object per line with a "text" string (C4's format)
//   books          one book per file, hard-wrapped lines joined into paragraphs
//   auto           per file: .jsonl/.json -> jsonl, a first line "<doc " -> wikiextractor,
//                  otherwise text
// Inputs may be files, directories (walked recursively, hidden entries skipped) or globs;
// files are read in sorted order. Lines that are not valid UTF-8, malformed JSON lines and
// unterminated <doc> blocks are counted and skipped; they are fatal only if no document is
// left at all.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace thx {

enum class CorpusFormat { auto_detect, text, text_files, wikiextractor, jsonl, books };

// "auto" | "text" | ...; anything else is an InputError that names `key` and the choices.
CorpusFormat parse_corpus_format(const std::string& name, const std::string& key = "format");
// "auto | text | text_files | wikiextractor | jsonl | books", for --format's help.
const char* corpus_format_help();
const char* corpus_format_name(CorpusFormat f);

struct CorpusStats {
  int64_t files = 0, documents = 0, bad_lines = 0, bytes = 0;
  std::vector<std::string> bad_examples;  // the first few, "file:line: why"
  void bad(const std::string& where, const std::string& why);
};

// "books:PATH" -> {books, PATH}: an input spec may name its own format (thx prepare reads
// Wikipedia and books in one run). A spec without a known format prefix -> {nullopt, spec}.
std::pair<std::optional<CorpusFormat>, std::string> split_format_prefix(const std::string& spec);

// Files, directories and globs -> sorted, de-duplicated regular files. InputError for an
// input that matches nothing.
std::vector<std::string> expand_inputs(const std::vector<std::string>& specs);

// Calls on_document(text) for every document of every file, in order. `progress`, if given,
// is called with the bytes read so far after each file chunk. Throws InputError when no
// document could be read at all.
void read_corpus(const std::vector<std::string>& files, CorpusFormat format,
                 const std::function<void(std::string&&)>& on_document, CorpusStats& stats,
                 const std::function<void(int64_t)>& progress = {});

// True if s is well-formed UTF-8.
bool valid_utf8(const std::string& s);

}  // namespace thx
