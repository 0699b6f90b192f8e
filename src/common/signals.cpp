#include "common/signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
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

// The at-once line, one for each signal, written whole before the handler may read it: two
// slots, and `g_line` names the one that is complete. Its store releases the slot's bytes and the
// handler's load acquires them (a lock-free atomic: async-signal-safe, and the handler may run on
// any thread). A handler still writing a slot when the next note but one is set could read a
// mixed line; notes change a few times a run, so that is not guarded.
constexpr size_t kLine = 1024;
char g_lines[2][2][kLine];  // [slot][0: SIGINT, 1: SIGTERM]
size_t g_sizes[2][2];
std::atomic<int> g_line{-1};  // the complete slot; -1: no line (not installed)
static_assert(std::atomic<int>::is_always_lock_free);
std::string g_who;

// write, signal and raise are async-signal-safe.
void on_signal_at_once(int sig) {
  const int slot = g_line.load(std::memory_order_acquire);
  if (slot >= 0) {
    const int i = sig == SIGINT ? 0 : 1;
    (void)!::write(STDERR_FILENO, g_lines[slot][i], g_sizes[slot][i]);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

int stop_signal() { return int(g_stop); }

void stop_at_once_with_a_line(const std::string& who) {
  g_who = who;
  set_stop_note("");
  for (const int sig : {SIGINT, SIGTERM}) {
    struct sigaction now {};
    if (::sigaction(sig, nullptr, &now) == 0 && now.sa_handler == SIG_IGN) continue;
    std::signal(sig, on_signal_at_once);
  }
}

void set_stop_note(const std::string& note) {
  if (g_who.empty()) return;  // not installed (the tests' process)
  const int slot = g_line.load(std::memory_order_relaxed) == 0 ? 1 : 0;
  for (const int i : {0, 1}) {
    std::string line = g_who + ": stopped by " + (i == 0 ? "SIGINT" : "SIGTERM") + note;
    line = line.substr(0, kLine - 1) + "\n";
    std::memcpy(g_lines[slot][i], line.data(), line.size());
    g_sizes[slot][i] = line.size();
  }
  g_line.store(slot, std::memory_order_release);
}

SignalScope::SignalScope() {
  g_stop = 0;
  set_stop_note("");
  old_int = std::signal(SIGINT, on_signal);
  old_term = std::signal(SIGTERM, on_signal);
}

SignalScope::~SignalScope() {
  if (std::uncaught_exceptions() > 0) return;  // an error on its way to its one line (above)
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
}

}  // namespace thx
