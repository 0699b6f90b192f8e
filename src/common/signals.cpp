#include "common/signals.h"

#include <exception>

namespace thx {
namespace {

volatile std::sig_atomic_t g_stop = 0;

// signal and raise are both async-signal-safe.
void on_signal(int sig) {
  if (g_stop) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
  g_stop = sig;
}

}  // namespace

int stop_signal() { return int(g_stop); }

SignalScope::SignalScope() {
  g_stop = 0;
  old_int = std::signal(SIGINT, on_signal);
  old_term = std::signal(SIGTERM, on_signal);
}

SignalScope::~SignalScope() {
  if (std::uncaught_exceptions() > 0) return;  // an error on its way to its one line (above)
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
}

}  // namespace thx
