// install_crash_report (common/runtime.h): a crash names itself and its stack on stderr, and the
// process still dies of its signal (a parent, torchrun or a sweep, sees the same status).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "common/runtime.h"
#include "test_util.h"

// Present (non-null) only in a sanitizer build, where the sanitizer reports instead.
extern "C" void __sanitizer_set_death_callback(void (*)(void)) __attribute__((weak));

namespace thx::test {
namespace {
namespace THX_FILE_ID {

// The child's stderr and how it ended, for a child that installs the report and raises `sig`.
std::pair<std::string, int> crash_child(int sig) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    install_crash_report();
    ::raise(sig);
    ::_exit(0);  // not reached
  }
  ::close(fds[1]);
  std::string err;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) err.append(buf, size_t(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return {err, status};
}

TEST(CrashReport, ASegfaultNamesItselfAndItsStackThenDiesOfIt) {
  if (__sanitizer_set_death_callback) GTEST_SKIP() << "a sanitizer build: the sanitizer reports crashes";
  const auto [err, status] = crash_child(SIGSEGV);
  ASSERT_TRUE(WIFSIGNALED(status)) << err;
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);
  ASSERT_EQ(err.rfind("thx: fatal signal SIGSEGV; stack:\n", 0), 0u) << err;
  EXPECT_NE(err.find("thx_"), std::string::npos) << "no frame of the test binary in:\n" << err;
}

TEST(CrashReport, AnAbortToo) {
  if (__sanitizer_set_death_callback) GTEST_SKIP() << "a sanitizer build: the sanitizer reports crashes";
  const auto [err, status] = crash_child(SIGABRT);
  ASSERT_TRUE(WIFSIGNALED(status)) << err;
  EXPECT_EQ(WTERMSIG(status), SIGABRT);
  EXPECT_EQ(err.rfind("thx: fatal signal SIGABRT; stack:\n", 0), 0u) << err;
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
