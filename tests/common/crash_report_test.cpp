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

// The child's stderr and how it ended, for a child that installs the report and runs `crash`.
template <typename F>
std::pair<std::string, int> crash_child(F crash) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    install_crash_report();
    crash();
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
  const auto [err, status] = crash_child([] { ::raise(SIGSEGV); });
  ASSERT_TRUE(WIFSIGNALED(status)) << err;
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);
  ASSERT_EQ(err.rfind("thx: fatal signal SIGSEGV at address 0x", 0), 0u) << err;
  const size_t stack = err.find("; stack:\n");
  ASSERT_NE(stack, std::string::npos) << err;
  EXPECT_NE(err.find("thx_", stack), std::string::npos) << "no frame of the test binary in:\n" << err;
}

// A call through a null function pointer: the unwinder has no frame at address 0 to start
// from, so the report names the address and the caller (the return address the call pushed).
void (*volatile g_null_function)() = nullptr;

TEST(CrashReport, ACallThroughANullPointerNamesItsCaller) {
  if (__sanitizer_set_death_callback) GTEST_SKIP() << "a sanitizer build: the sanitizer reports crashes";
#if !(defined(__x86_64__) && defined(__linux__))
  GTEST_SKIP() << "the instruction and caller lines are x86-64 Linux only";
#endif
  const auto [err, status] = crash_child([] { g_null_function(); });
  ASSERT_TRUE(WIFSIGNALED(status)) << err;
  EXPECT_EQ(WTERMSIG(status), SIGSEGV);
  const std::string head = "thx: fatal signal SIGSEGV at address 0x0; instruction, then the word on top of the stack:\n";
  ASSERT_EQ(err.rfind(head, 0), 0u) << err;
  const size_t second = err.find('\n', head.size());  // the instruction's line ([0x0]), then the caller's
  ASSERT_NE(second, std::string::npos) << err;
  const std::string caller = err.substr(second + 1, err.find('\n', second + 1) - second - 1);
  EXPECT_NE(caller.find("thx_"), std::string::npos) << "the caller is not in the test binary:\n" << err;
}

TEST(CrashReport, AnAbortToo) {
  if (__sanitizer_set_death_callback) GTEST_SKIP() << "a sanitizer build: the sanitizer reports crashes";
  const auto [err, status] = crash_child([] { ::raise(SIGABRT); });
  ASSERT_TRUE(WIFSIGNALED(status)) << err;
  EXPECT_EQ(WTERMSIG(status), SIGABRT);
  EXPECT_EQ(err.rfind("thx: fatal signal SIGABRT; stack:\n", 0), 0u) << err;
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
