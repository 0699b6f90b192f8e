// signals.h: SIGINT and SIGTERM during long work. In a training loop (training/loop.cpp) the
// first asks for a checkpoint and a clean stop after the current step; elsewhere (thx prepare's
// tokenizing, thx predict's decoding) it stops the work where it next checks, which says what it
// left on disk. A second signal, while the first is pending, ends the process at once.
#pragma once
#include <csignal>
#include <stdexcept>
#include <string>

namespace thx {

// The signal work was asked to stop by (SIGINT, SIGTERM), or 0.
int stop_signal();

// Installs the handlers for the life of the work, clearing any earlier request. Work that ends
// normally gets the previous handlers back. Work that ends in an error keeps these while the
// error unwinds and is reported: a SIGTERM then (torchrun stopping the group because another rank
// died) must not end the process before its one line is written (a second signal still does).
struct SignalScope {
  using Handler = void (*)(int);
  Handler old_int, old_term;
  SignalScope();
  ~SignalScope();
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
};

// Work that a signal stopped, thrown where it checks stop_signal(): the command line prints the
// message (what was done, what is left on disk) and exits 128 + the signal, the status a shell
// gives a process the signal ended.
struct Interrupted : std::runtime_error {
  Interrupted(int sig, const std::string& message) : std::runtime_error(message), signal(sig) {}
  int signal;
};

}  // namespace thx
