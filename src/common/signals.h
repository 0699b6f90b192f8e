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

// Outside a SignalScope (a command's setup: reading data, building a model, waiting for a run
// folder's lock; SentencePiece's training; work with nothing to save), SIGINT and SIGTERM end the
// process at once, as by default (its parent sees the signal), with one line on stderr first:
// "<who>: stopped by SIGTERM", then the note where one is set. main() installs it for the
// command ("thx pretrain"); a signal the process began with ignored (a shell's background job's
// SIGINT) stays ignored. Nothing else changes: a SignalScope still takes over while it lives.
void stop_at_once_with_a_line(const std::string& who);

// What follows the signal's name in that line until it is set again ("" ends it): where it was
// and what is left on disk, e.g. " while it set up, before it recorded anything in runs/a; ...".
// Each SignalScope ends the note too, since the work it covers changes what is on disk.
void set_stop_note(const std::string& note);

// A note for the life of one piece of work.
struct StopNote {
  explicit StopNote(const std::string& note) { set_stop_note(note); }
  ~StopNote() { set_stop_note(""); }
  StopNote(const StopNote&) = delete;
  StopNote& operator=(const StopNote&) = delete;
};

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
