#include "common/csv.h"

#include <fstream>
#include <sstream>

#include "common/error.h"

namespace thx {

CsvTable read_csv(const std::string& path, char sep) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot read file", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();

  CsvTable table;
  table.path = path;
  std::vector<std::string> row;
  std::string cell;
  bool quoted = false, any = false;
  int64_t line = 1, row_line = 1;
  auto end_row = [&]() {
    row.push_back(cell);
    cell.clear();
    if (!(row.size() == 1 && row[0].empty() && !any)) {  // skip blank lines
      if (table.header.empty()) {
        table.header = row;
      } else {
        if (row.size() != table.header.size())
          throw InputError(fmt::format("{}:{}: {} fields, the header has {}", path, row_line,
                                       row.size(), table.header.size()));
        std::map<std::string, std::string> r;
        for (size_t i = 0; i < row.size(); ++i) r[table.header[i]] = row[i];
        table.rows.push_back(std::move(r));
        table.lines.push_back(row_line);
      }
    }
    row.clear();
    any = false;
    row_line = line + 1;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') cell += '"', ++i;
      else if (c == '"') quoted = false;
      else {
        if (c == '\n') ++line;
        cell += c;
      }
    } else if (c == '"' && cell.empty()) {
      quoted = any = true;
    } else if (c == sep) {
      row.push_back(cell);
      cell.clear();
      any = true;
    } else if (c == '\n') {
      end_row();
      ++line;
    } else if (c != '\r') {
      cell += c;
      any = true;
    }
  }
  if (quoted) throw InputError(fmt::format("{}:{}: unterminated quoted field", path, row_line));
  if (!cell.empty() || !row.empty()) end_row();
  if (table.header.empty()) throw InputError(fmt::format("{}: empty file", path));
  return table;
}

}  // namespace thx
