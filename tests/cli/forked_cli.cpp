// forked_cli.cpp: fork_thx and its helper process (forked_cli.h), and thx_tests' main,
// which is that helper where THX_TEST_ZYGOTE names its socket.
#include "cli/forked_cli.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wordexp.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "common/fs.h"

extern char** environ;

namespace thx::test {
namespace forked_cli {  // (named, not anonymous: main below calls into it from the global scope)

bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= size_t(w);
  }
  return true;
}

bool read_all(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r, n -= size_t(r);
  }
  return true;
}

// A list of strings on the socket: its count, then each one's length and bytes.
bool send_strings(int fd, const std::vector<std::string>& list) {
  const uint32_t count = uint32_t(list.size());
  if (!write_all(fd, &count, sizeof count)) return false;
  for (const auto& s : list) {
    const uint32_t n = uint32_t(s.size());
    if (!write_all(fd, &n, sizeof n) || !write_all(fd, s.data(), n)) return false;
  }
  return true;
}

bool receive_strings(int fd, std::vector<std::string>& list) {
  uint32_t count = 0;
  if (!read_all(fd, &count, sizeof count)) return false;
  list.assign(count, "");
  for (auto& s : list) {
    uint32_t n = 0;
    if (!read_all(fd, &n, sizeof n)) return false;
    s.resize(n);
    if (n > 0 && !read_all(fd, s.data(), n)) return false;
  }
  return true;
}

// The copy: the test's environment and directory, stdout and stderr into `out`, then thx.
[[noreturn]] void run_copy(int socket, std::vector<std::string>& argv, const std::vector<std::string>& env,
                           const std::string& cwd, const std::string& out) {
  ::close(socket);
  ::signal(SIGPIPE, SIG_DFL);
  ::clearenv();
  for (const auto& e : env) ::putenv(::strdup(e.c_str()));  // (putenv keeps the pointer)
  const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ::chdir(cwd.c_str()) != 0) ::_exit(127);
  ::dup2(fd, 1), ::dup2(fd, 2), ::close(fd);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const int code = thx::cli_main(int(argv.size()), args.data());
  std::cout.flush(), std::cerr.flush(), std::fflush(nullptr);
  ::_exit(code);
}

// The helper: one request at a time (the copy's argv, environment, directory and output file),
// answered with the copy's exit status as the shell reports it (128 + N for a signal N), once it
// ended or was killed at two minutes. Ends when the test process closes its socket.
int serve_copies(int socket) {
  ::signal(SIGPIPE, SIG_IGN);
  for (;;) {
    std::vector<std::string> argv, env, where;
    if (!receive_strings(socket, argv) || !receive_strings(socket, env) || !receive_strings(socket, where) ||
        where.size() != 2)
      return 0;
    const pid_t pid = ::fork();
    if (pid == 0) run_copy(socket, argv, env, where[0], where[1]);
    int32_t code = -1;
    if (pid > 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
      int status = 0;
      while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
    }
    if (!write_all(socket, &code, sizeof code)) return 0;
  }
}

// The test process's end of the helper's socket, the helper started at the first call (-1:
// none could be started).
int helper_socket() {
  static int fd = [] {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
    // Its environment, made before the fork: the thread-pool settings as run_command's, so that
    // the OpenMP and OpenBLAS it loads read them.
    std::vector<std::string> env = {"THX_TEST_ZYGOTE=" + std::to_string(sv[1]), "OMP_WAIT_POLICY=PASSIVE",
                                    "OPENBLAS_THREAD_TIMEOUT=4"};
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, "THX_TEST_ZYGOTE=", 16) && std::strncmp(*e, "OMP_WAIT_POLICY=", 16) &&
          std::strncmp(*e, "OPENBLAS_THREAD_TIMEOUT=", 24))
        env.push_back(*e);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    char* argv[] = {const_cast<char*>("thx_tests (forked_cli helper)"), nullptr};
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::fcntl(sv[1], F_SETFD, 0);  // the helper's end survives the exec
      ::execve("/proc/self/exe", argv, envp.data());
      ::_exit(127);
    }
    ::close(sv[1]);
    if (pid < 0) {
      ::close(sv[0]);
      return -1;
    }
    return sv[0];
  }();
  return fd;
}

}  // namespace forked_cli

int serve_forked_cli(int socket) { return forked_cli::serve_copies(socket); }

RunResult fork_thx(const std::string& args) {
  static std::mutex mutex;  // one request at a time on the socket
  const std::lock_guard<std::mutex> lock(mutex);
  wordexp_t words;
  if (::wordexp(args.c_str(), &words, WRDE_NOCMD) != 0) return run_thx(args);
  std::vector<std::string> argv = {THX_BINARY};
  for (size_t i = 0; i < words.we_wordc; ++i) argv.push_back(words.we_wordv[i]);
  ::wordfree(&words);
  const int socket = forked_cli::helper_socket();
  if (socket < 0) return run_thx(args);
  set_thread_environment();  // (test_util.h)
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.push_back(*e);
  char out[] = "/tmp/thx-forked-XXXXXX";
  const int fd = ::mkstemp(out);
  if (fd < 0) return run_thx(args);
  ::close(fd);
  int32_t code = -1;
  using forked_cli::send_strings;
  const bool answered = send_strings(socket, argv) && send_strings(socket, env) &&
                        send_strings(socket, {std::filesystem::current_path().string(), out}) &&
                        forked_cli::read_all(socket, &code, sizeof code);
  RunResult r;
  if (answered) r.code = code, r.out = read_file(out);
  ::unlink(out);
  return answered ? r : run_thx(args);
}

}  // namespace thx::test

// thx_tests' main (in place of gtest_main's): the tests, or, where THX_TEST_ZYGOTE names its
// socket, fork_thx's helper.
int main(int argc, char** argv) {
  if (const char* socket = std::getenv("THX_TEST_ZYGOTE")) return thx::test::serve_forked_cli(std::atoi(socket));
  // A thx command line: a forked copy started its own binary, which is this one (thx sweep's runs
  // are /proc/self/exe): refused, not taken for no test option and every test run.
  if (argc > 1 && argv[1][0] != '-') {
    std::fprintf(stderr, "thx_tests: '%s' is a thx command, not a test option: a test ran a command that starts "
                         "thx's own binary (thx sweep's runs) with fork_thx; run it with run_thx\n", argv[1]);
    return 2;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
