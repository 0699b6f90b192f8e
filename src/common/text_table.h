// text_table.h: one table, three renderings (Markdown for terminals and docs, CSV for
// scripts, LaTeX for papers), with footnotes.
#pragma once
#include <string>
#include <vector>

namespace thx {

enum class TableFormat { markdown, csv, latex };

// "markdown" | "csv" | "latex"; anything else is an InputError naming the allowed values.
TableFormat parse_table_format(const std::string& name);

struct TextTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::string align;               // one of 'l' / 'r' per column; default: all 'l'
  std::vector<std::string> notes;  // footnotes, printed below the table
  std::string caption;
};

std::string render(const TextTable& table, TableFormat format);

}  // namespace thx
