#include "common/text_table.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"

namespace thx {

TableFormat parse_table_format(const std::string& name) {
  if (name == "markdown") return TableFormat::markdown;
  if (name == "csv") return TableFormat::csv;
  if (name == "latex") return TableFormat::latex;
  throw InputError(fmt::format("--format '{}' is not a format; allowed: markdown, csv, latex", name));
}

namespace {

// Display width in code points, so that "·" and "×" do not break column alignment.
size_t width(const std::string& s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; });
}

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string latex_cell(const std::string& s) {
  if (s.size() > 1 && s.front() == '$' && s.back() == '$') return s;  // already math
  std::string out;
  for (char c : s) {
    if (c == '_' || c == '&' || c == '%' || c == '#') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string render(const TextTable& t, TableFormat format) {
  const size_t cols = t.header.size();
  auto align = [&](size_t i) { return i < t.align.size() ? t.align[i] : 'l'; };
  std::string out;
  if (format == TableFormat::csv) {
    auto line = [&](const std::vector<std::string>& r) {
      for (size_t i = 0; i < r.size(); ++i) out += (i ? "," : "") + csv_cell(r[i]);
      out += "\n";
    };
    line(t.header);
    for (const auto& r : t.rows) line(r);
    return out;
  }
  if (format == TableFormat::latex) {
    out += "\\begin{table}\n\\centering\n";
    if (!t.caption.empty()) out += "\\caption{" + latex_cell(t.caption) + "}\n";
    out += "\\begin{tabular}{";
    for (size_t i = 0; i < cols; ++i) out += align(i);
    out += "}\n\\hline\n";
    auto line = [&](const std::vector<std::string>& r) {
      for (size_t i = 0; i < r.size(); ++i) out += (i ? " & " : "") + latex_cell(r[i]);
      out += " \\\\\n";
    };
    line(t.header);
    out += "\\hline\n";
    for (const auto& r : t.rows) line(r);
    out += "\\hline\n\\end{tabular}\n";
    for (const auto& n : t.notes) out += "\\\\{\\footnotesize " + latex_cell(n) + "}\n";
    out += "\\end{table}\n";
    return out;
  }
  // Markdown, padded so that it also reads as a plain-text table.
  std::vector<size_t> w(cols, 3);
  for (size_t i = 0; i < cols; ++i) w[i] = std::max(w[i], width(t.header[i]));
  for (const auto& r : t.rows)
    for (size_t i = 0; i < cols && i < r.size(); ++i) w[i] = std::max(w[i], width(r[i]));
  auto pad = [&](const std::string& s, size_t i) {
    const std::string fill(w[i] - width(s), ' ');
    return align(i) == 'r' ? fill + s : s + fill;
  };
  if (!t.caption.empty()) out += t.caption + "\n\n";
  auto line = [&](const std::vector<std::string>& r) {
    out += "|";
    for (size_t i = 0; i < cols; ++i) out += " " + pad(i < r.size() ? r[i] : "", i) + " |";
    out += "\n";
  };
  line(t.header);
  out += "|";
  for (size_t i = 0; i < cols; ++i)
    out += align(i) == 'r' ? std::string(w[i] + 1, '-') + ":|" : std::string(w[i] + 2, '-') + "|";
  out += "\n";
  for (const auto& r : t.rows) line(r);
  if (!t.notes.empty()) out += "\n";
  for (const auto& n : t.notes) out += n + "\n";
  return out;
}

}  // namespace thx
