// main.cpp: the thx binary: the command line (cli/cli.cpp), which re-executes thx with the
// thread environment (common/runtime.h) once it knows the command computes.
#include "cli/command.h"

int main(int argc, char** argv) {
  return thx::cli_main(argc, argv);
}
