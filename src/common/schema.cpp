#include "common/schema.h"

#include <charconv>
#include <cstdlib>

namespace thx::cfg {

std::string show(const YAML::Node& node) {
  if (!node.IsDefined()) return "nothing";
  if (node.IsNull()) return "null";
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsSequence()) return "a list";
  return "a mapping";
}

void read_value(const YAML::Node& node, const std::string& path, int64_t& out) {
  if (!node.IsScalar())
    throw ConfigError(path, fmt::format("expected an integer, got {}", show(node)));
  const std::string& s = node.Scalar();
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data() + (!s.empty() && s[0] == '+'), end, out);
  if (ec == std::errc::result_out_of_range)
    throw ConfigError(path, fmt::format("{} is out of range for an integer", show(node)));
  if (ec != std::errc() || ptr != end || s.empty())
    throw ConfigError(path, fmt::format("expected an integer, got {}", show(node)));
}

void read_value(const YAML::Node& node, const std::string& path, double& out) {
  if (!node.IsScalar())
    throw ConfigError(path, fmt::format("expected a number, got {}", show(node)));
  const std::string& s = node.Scalar();
  char* end = nullptr;
  out = s.empty() ? 0.0 : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(out))
    throw ConfigError(path, fmt::format("expected a finite number, got {}", show(node)));
}

void read_value(const YAML::Node& node, const std::string& path, bool& out) {
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, out))
    throw ConfigError(path, fmt::format("expected true or false, got {}", show(node)));
}

void read_value(const YAML::Node& node, const std::string& path, std::string& out) {
  if (!node.IsScalar())
    throw ConfigError(path, fmt::format("expected a string, got {}", show(node)));
  out = node.Scalar();
}

}  // namespace thx::cfg
