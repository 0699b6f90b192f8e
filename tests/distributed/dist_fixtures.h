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
#include "training/checkpoint.h"

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

// Two ranks on this machine (torchrun's standalone rendezvous on a free port).
inline std::string two_ranks() { return "--standalone --nproc_per_node 2"; }

// Every parameter of two checkpoints within atol + rtol * max |b| (or equal bitwise, rtol 0).
// The absolute floor is for parameters that stay at float noise. The key bias of attention
// (bias_k) is one: its gradient is exactly zero in exact arithmetic (softmax ignores a shift of
// all logits of a query), so what it holds is rounding residue, different for every summation
// order, and Adam's normalized update turns that residue into steps of its own. For bias_k the
// check is therefore that both runs kept it at noise level (|x| < 1e-5), not that they agree.
inline ::testing::AssertionResult same_params(const std::string& a, const std::string& b, double rtol,
                                              double atol = 1e-8) {
  const Checkpoint ca = load_checkpoint(a), cb = load_checkpoint(b);
  if (ca.params.size() != cb.params.size()) return ::testing::AssertionFailure() << "parameter sets differ";
  for (const auto& [k, v] : cb.params) {
    auto it = ca.params.find(k);
    if (it == ca.params.end()) return ::testing::AssertionFailure() << a << " has no " << k;
    const bool noise = k.size() >= 7 && k.compare(k.size() - 7, 7, "/bias_k") == 0;
    if (noise && rtol > 0) {
      const double big = std::max(it->second.abs().max().item<double>(), v.abs().max().item<double>());
      if (big >= 1e-5) return ::testing::AssertionFailure() << k << " is no longer at noise level: " << big;
    } else if (rtol == 0) {
      if (!torch::equal(it->second, v)) return ::testing::AssertionFailure() << k << " differs bitwise";
    } else if (auto r = close(it->second, v, atol, rtol); !r) {
      return ::testing::AssertionFailure() << k << ": " << r.message();
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace thx::test
