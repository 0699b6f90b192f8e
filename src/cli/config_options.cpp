#include "cli/command.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace thx {

void ConfigOptions::add_to(CLI::App* app) {
  app->add_option("--config", files, "YAML config file; repeat to merge several, in order")
      ->type_name("FILE");
  app->add_option("--set", sets, "override one key, e.g. --set attention.h=24 (VALUE is YAML, "
                                 "so --set attention.dynamic=[X_l,M_l] is a list); repeatable")
      ->type_name("KEY=VALUE");
  app->add_flag("--dump-config", dump, "print the resolved config as YAML and exit");
}

ConfigTree ConfigOptions::tree(const std::string& defaults_yaml) const {
  ConfigTree t;
  if (!defaults_yaml.empty()) t.merge_text(defaults_yaml, "defaults");
  for (const auto& f : files) t.merge_file(f);
  for (const auto& s : sets) t.set(s);
  return t;
}

int dump_config(const std::string& yaml) {
  std::fputs(yaml.c_str(), stdout);
  return 0;
}

namespace {
// A check that the value is a number above 0 (or at least 0 with zero_ok).
CLI::Validator number_check(bool zero_ok) {
  const std::string bound = zero_ok ? ">= 0" : "> 0";
  auto check = [zero_ok, bound](std::string& value) -> std::string {
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty()) return "an empty value is invalid: must be a number " + bound;
    if (*end != '\0' || errno == ERANGE || !std::isfinite(v)) return value + " is invalid: must be a number " + bound;
    if (zero_ok ? v < 0 : v <= 0) return value + " is invalid: must be " + bound;
    return "";
  };
  return CLI::Validator(check, zero_ok ? "NONNEGATIVE" : "POSITIVE");
}
}  // namespace

const CLI::Validator& positive_number() {
  static const CLI::Validator v = number_check(false);
  return v;
}

const CLI::Validator& non_negative_number() {
  static const CLI::Validator v = number_check(true);
  return v;
}

}  // namespace thx
