// dist_fixtures.h: thx under torchrun, as a user launches it: Debian 12's torchrun with
// --no_python and --redirects 2 --tee 2 (../shared/notes/torchrun.md), loopback only, every
// launch bounded by `timeout`.
#pragma once
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <string>

#include "test_util.h"
#include "training/training_fixtures.h"

namespace thx::test {

// A TCP port nobody listens on now (the kernel's choice for port 0).
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// `torchrun <launch> --no_python <program>`, killed after `limit_s` seconds, with a TMPDIR of its
// own, removed after it: torchrun's agent keeps each launch's logs (--redirects, --tee) in a
// torchelastic_* folder of TMPDIR and never removes it (each CI run left nine in /tmp).
inline RunResult run_torchrun_program(const std::string& launch, const std::string& program, int limit_s = 90) {
  const TempDir tmp;
  return run_command(fmt::format("TMPDIR={} timeout -k 5 {} torchrun {} --redirects 2 --tee 2 --no_python {} 2>&1",
                                 tmp.path.string(), limit_s, launch, program));
}

// `torchrun <launch> --no_python thx --threads 1 --device cpu <args>`, as above: these tests are
// data parallel on the CPU (Gloo), on any machine (a GPU machine's default device is its GPU, and
// it has one: NCCL needs one a rank). THX_TEST_SHOW=1 prints what the launch printed.
inline RunResult run_torchrun(const std::string& launch, const std::string& args, int limit_s = 90) {
  RunResult r = run_torchrun_program(launch, fmt::format("{} --threads 1 --device cpu {}", THX_BINARY, args), limit_s);
  if (std::getenv("THX_TEST_SHOW")) std::fprintf(stderr, "%s\n", r.out.c_str());
  return r;
}

// Two ranks on this machine (torchrun's standalone rendezvous, always on port 29400: these
// tests run one at a time, RUN_SERIAL).
inline std::string two_ranks() { return "--standalone --nproc_per_node 2"; }

}  // namespace thx::test
