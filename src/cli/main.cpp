// main.cpp: the thx binary: the thread environment, then the command line (cli/cli.cpp).
#include "cli/command.h"
#include "common/runtime.h"

int main(int argc, char** argv) {
  thx::reexec_with_thread_environment(argv);  // see common/runtime.h
  return thx::cli_main(argc, argv);
}
