#include "data/corpus.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/error.h"

namespace thx {
namespace fs = std::filesystem;

namespace {

const std::vector<std::pair<std::string, CorpusFormat>> kFormats = {
    {"auto", CorpusFormat::auto_detect}, {"text", CorpusFormat::text},
    {"text_files", CorpusFormat::text_files}, {"wikiextractor", CorpusFormat::wikiextractor},
    {"jsonl", CorpusFormat::jsonl}, {"books", CorpusFormat::books}};

bool blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); });
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

CorpusFormat detect(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".jsonl" || ext == ".json") return CorpusFormat::jsonl;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!blank(line)) return line.rfind("<doc ", 0) == 0 ? CorpusFormat::wikiextractor : CorpusFormat::text;
  return CorpusFormat::text;
}

// Reads one file line by line (CR stripped, invalid UTF-8 counted and skipped).
class LineReader {
 public:
  LineReader(const std::string& path, CorpusStats& stats) : path_(path), in_(path), stats_(stats) {
    if (!in_) throw InputError(fmt::format("{}: cannot read file", path));
  }
  bool next(std::string& line) {
    while (std::getline(in_, line)) {
      ++number_;
      bytes_ += int64_t(line.size()) + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (valid_utf8(line)) return true;
      stats_.bad(where(), "not valid UTF-8");
    }
    return false;
  }
  std::string where() const { return fmt::format("{}:{}", path_, number_); }
  int64_t bytes() const { return bytes_; }

 private:
  std::string path_;
  std::ifstream in_;
  CorpusStats& stats_;
  int64_t number_ = 0, bytes_ = 0;
};

void emit(std::string&& doc, CorpusStats& stats, const std::function<void(std::string&&)>& fn) {
  if (blank(doc)) return;
  ++stats.documents;
  fn(std::move(doc));
}

void read_file(const std::string& path, CorpusFormat format, CorpusStats& stats,
               const std::function<void(std::string&&)>& fn) {
  if (format == CorpusFormat::auto_detect) format = detect(path);
  LineReader r(path, stats);
  std::string line, doc;
  switch (format) {
    case CorpusFormat::text:  // blank lines separate documents
      while (r.next(line)) {
        if (blank(line)) emit(std::move(doc), stats, fn), doc.clear();
        else doc += (doc.empty() ? "" : "\n") + line;
      }
      emit(std::move(doc), stats, fn);
      break;
    case CorpusFormat::text_files:
      while (r.next(line)) doc += line + "\n";
      emit(std::move(doc), stats, fn);
      break;
    case CorpusFormat::books: {  // hard-wrapped lines -> paragraphs, one per line
      std::string para;
      while (r.next(line)) {
        const std::string t = trim(line);
        if (t.empty()) {
          if (!para.empty()) doc += (doc.empty() ? "" : "\n") + para, para.clear();
        } else {
          para += (para.empty() ? "" : " ") + t;
        }
      }
      if (!para.empty()) doc += (doc.empty() ? "" : "\n") + para;
      emit(std::move(doc), stats, fn);
      break;
    }
    case CorpusFormat::wikiextractor: {
      bool inside = false;
      std::string start;
      while (r.next(line)) {
        if (line.rfind("<doc ", 0) == 0 || line == "<doc>") {
          if (inside) stats.bad(start, "<doc> not closed before the next one");
          inside = true, doc.clear(), start = r.where();
        } else if (line == "</doc>") {
          if (inside) emit(std::move(doc), stats, fn);
          else stats.bad(r.where(), "</doc> without <doc>");
          inside = false, doc.clear();
        } else if (inside) {
          if (!blank(line)) doc += (doc.empty() ? "" : "\n") + line;
        } else if (!blank(line)) {
          stats.bad(r.where(), "text outside <doc> ... </doc>");
        }
      }
      if (inside) stats.bad(start, "<doc> not closed at end of file");
      break;
    }
    case CorpusFormat::jsonl:
      while (r.next(line)) {
        if (blank(line)) continue;
        try {
          const auto j = nlohmann::json::parse(line);
          if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
            stats.bad(r.where(), "no \"text\" string");
            continue;
          }
          emit(j["text"].get<std::string>(), stats, fn);
        } catch (const nlohmann::json::exception&) {
          stats.bad(r.where(), "not valid JSON");
        }
      }
      break;
    default:
      break;
  }
  stats.bytes += r.bytes();
}

}  // namespace

void CorpusStats::bad(const std::string& where, const std::string& why) {
  ++bad_lines;
  if (bad_examples.size() < 5) bad_examples.push_back(where + ": " + why);
}

const char* corpus_format_help() { return "auto | text | text_files | wikiextractor | jsonl | books"; }

CorpusFormat parse_corpus_format(const std::string& name, const std::string& key) {
  for (const auto& [n, f] : kFormats)
    if (n == name) return f;
  std::string allowed;
  for (const auto& [n, f] : kFormats) allowed += (allowed.empty() ? "" : ", ") + n;
  throw ConfigError(key, fmt::format("'{}' is not a corpus format; allowed: {}", name, allowed));
}

const char* corpus_format_name(CorpusFormat f) {
  for (const auto& [n, g] : kFormats)
    if (g == f) return n.c_str();
  return "?";
}

std::pair<std::optional<CorpusFormat>, std::string> split_format_prefix(const std::string& spec) {
  const auto colon = spec.find(':');
  if (colon != std::string::npos && colon > 0) {
    const std::string name = spec.substr(0, colon);
    for (auto f : {CorpusFormat::auto_detect, CorpusFormat::text, CorpusFormat::text_files,
                   CorpusFormat::wikiextractor, CorpusFormat::jsonl, CorpusFormat::books})
      if (name == corpus_format_name(f)) return {f, spec.substr(colon + 1)};
  }
  return {std::nullopt, spec};
}

std::vector<std::string> expand_inputs(const std::vector<std::string>& specs) {
  std::set<std::string> files;
  bool matched = false;
  auto add = [&](const std::string& f) { files.insert(f), matched = true; };
  auto add_dir = [&](const fs::path& dir) {
    for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) {
      const std::string name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) add(it->path().string());
    }
  };
  for (const auto& spec : specs) {
    matched = false;
    if (fs::is_directory(spec)) {
      add_dir(spec);
    } else if (fs::is_regular_file(spec)) {
      add(spec);
    } else {
      glob_t g{};
      if (::glob(spec.c_str(), 0, nullptr, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i) {
          if (fs::is_directory(g.gl_pathv[i])) add_dir(g.gl_pathv[i]);
          else if (fs::is_regular_file(g.gl_pathv[i])) add(g.gl_pathv[i]);
        }
      globfree(&g);
    }
    if (!matched && fs::is_directory(spec))
      throw InputError(fmt::format("{}: a directory with no files in it (those whose names start with '.' are "
                                   "skipped)", spec));
    if (!matched && fs::exists(spec))  // a pipe, a socket: not "no such file"
      throw InputError(fmt::format("{}: not a regular file or a directory (a pipe, socket or device); write the "
                                   "corpus to a file", spec));
    if (!matched)
      throw InputError(fmt::format("{}: no such file, directory or matching file", spec));
  }
  return {files.begin(), files.end()};
}

void read_corpus(const std::vector<std::string>& files, CorpusFormat format,
                 const std::function<void(std::string&&)>& on_document, CorpusStats& stats,
                 const std::function<void(int64_t)>& progress) {
  for (const auto& f : files) {
    read_file(f, format, stats, on_document);
    ++stats.files;
    if (progress) progress(stats.bytes);
  }
  if (stats.documents == 0) {
    std::string why = stats.bad_examples.empty() ? "" : "; first problem: " + stats.bad_examples[0];
    throw InputError(fmt::format("{}{}: no usable document ({} malformed lines){}",
                                 files.empty() ? "corpus" : files[0],
                                 files.size() > 1 ? fmt::format(" and {} more files", files.size() - 1) : "",
                                 stats.bad_lines, why));
  }
}

bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > n) return false;
    for (int k = 1; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return false;
    if (len == 2 && c < 0xC2) return false;                        // overlong
    if (len == 3 && c == 0xE0 && p[i + 1] < 0xA0) return false;    // overlong
    if (len == 3 && c == 0xED && p[i + 1] >= 0xA0) return false;   // surrogates
    if (len == 4 && (c > 0xF4 || (c == 0xF0 && p[i + 1] < 0x90) || (c == 0xF4 && p[i + 1] >= 0x90)))
      return false;
    i += len;
  }
  return true;
}

}  // namespace thx
