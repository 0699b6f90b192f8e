#include "cli/command.h"

#include <cstdio>

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

}  // namespace thx
