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

// `torchrun <launch> --no_python thx --threads 1 <args>`, killed after `limit_s` seconds.
// THX_TEST_SHOW=1 prints what the launch printed.
inline RunResult run_torchrun(const std::string& launch, const std::string& args, int limit_s = 90) {
  RunResult r = run_command(fmt::format("timeout -k 5 {} torchrun {} --redirects 2 --tee 2 --no_python {} --threads 1 {} 2>&1",
                                        limit_s, launch, THX_BINARY, args));
  if (std::getenv("THX_TEST_SHOW")) std::fprintf(stderr, "%s\n", r.out.c_str());
  return r;
}

// Two ranks on this machine (torchrun's standalone rendezvous, always on port 29400: these
// tests run one at a time, RUN_SERIAL).
inline std::string two_ranks() { return "--standalone --nproc_per_node 2"; }

}  // namespace thx::test
