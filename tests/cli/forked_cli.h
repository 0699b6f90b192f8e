// forked_cli.h: thx's command line run in a copy of a process that has LibTorch loaded, for the
// CLI tests' long lists of refusals. A thx process spends about 0.4 s loading LibTorch and its
// 290 libraries before main, most of a refusal's time (Cli.* starts thx some 200 times); a fork
// costs milliseconds.
//
// The copies are forked by a helper process (a "zygote"): thx_tests itself, started again
// with THX_TEST_ZYGOTE set (forked_cli.cpp's main serves instead of running tests). It is
// started at a test process's first fork_thx and has run no computation, so each copy's
// OpenMP is fresh: GNU OpenMP does not survive a fork of a process that used it (a copy
// forked from the tests' own process after a matmul hung in its first parallel region). Each
// copy takes the test's environment and working directory as they are at the call, writes
// stdout and stderr into one file as `2>&1`, runs cli_main (the binary's main but for its
// thread-environment re-execution, which run_command's environment makes a no-op) and exits
// with its code: its own process, so nothing it sets outlives it.
#pragma once
#include <string>

#include "test_util.h"

namespace thx::test {

// run_thx(args), in a copy of the helper. `args` are split into words as the shell would
// (wordexp, no command substitution); a line the shell would do more with (a redirection, a
// pipe, braces), or no helper, runs the thx binary instead. A copy still running after two
// minutes is killed (code 137: SIGKILL, as the shell reports it), as a hung process would be.
RunResult fork_thx(const std::string& args);
// The helper's loop (thx_tests' main runs it where THX_TEST_ZYGOTE names its socket).
int serve_forked_cli(int socket);

}  // namespace thx::test
