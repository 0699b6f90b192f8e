// csv.h: a small RFC 4180 reader (quoted fields, doubled quotes, CRLF), for the paper's
// tables.csv and for TSV task files. Rows come back as maps from header names to cells.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace thx {

struct CsvTable {
  std::string path;
  std::vector<std::string> header;
  std::vector<std::map<std::string, std::string>> rows;
  std::vector<int64_t> lines;  // 1-based source line of each row, for messages
};

// Throws InputError naming the file and line for an unreadable file, an unterminated quote or
// a row whose field count differs from the header's.
CsvTable read_csv(const std::string& path, char sep = ',');

}  // namespace thx
