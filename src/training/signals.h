// signals.h: SIGINT and SIGTERM during a training loop (training/loop.cpp): the first asks for a
// checkpoint and a clean stop after the current step; a second, while that is pending, ends the
// process at once.
#pragma once
#include <csignal>

namespace thx {

// The signal a loop was asked to stop by (SIGINT, SIGTERM), or 0.
int stop_signal();

// Installs the handlers for the life of a loop, clearing any earlier request. A loop that ends
// normally gets the previous handlers back. One that ends in an error keeps these while the error
// unwinds and is reported: a SIGTERM then (torchrun stopping the group because another rank
// died) must not end the process before its one line is written (a second signal still does).
struct SignalScope {
  using Handler = void (*)(int);
  Handler old_int, old_term;
  SignalScope();
  ~SignalScope();
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
};

}  // namespace thx
