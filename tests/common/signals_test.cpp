// common/signals.h: a loop's SIGINT and SIGTERM handlers, with signals raised in this process.
// The handler in place before each "loop" records what reaches it, so that a wrong handler shows
// as a wrong count instead of ending the test binary.
#include <gtest/gtest.h>

#include <csignal>
#include <stdexcept>

#include "common/signals.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

volatile std::sig_atomic_t g_previous = 0;  // signals that reached the previous handler
void previous(int) { g_previous = g_previous + 1; }

struct Signals : ::testing::Test {
  SignalScope::Handler saved_int = nullptr, saved_term = nullptr;
  void SetUp() override {
    g_previous = 0;
    saved_int = std::signal(SIGINT, previous);
    saved_term = std::signal(SIGTERM, previous);
  }
  void TearDown() override {
    std::signal(SIGINT, saved_int);
    std::signal(SIGTERM, saved_term);
  }
};

TEST_F(Signals, ALoopThatEndsNormallyGivesThePreviousHandlersBack) {
  {
    SignalScope loop;
    std::raise(SIGTERM);
    EXPECT_EQ(stop_signal(), SIGTERM);  // a checkpoint and a clean stop asked for
  }
  EXPECT_EQ(g_previous, 0);
  std::raise(SIGTERM);
  std::raise(SIGINT);
  EXPECT_EQ(g_previous, 2);
}

// torchrun stops the other ranks with SIGTERM once one has died, while they are reporting it: a
// loop ending in an error keeps its handlers, so the signal is taken (not the previous handler's,
// by default the end of the process before its one line) until the process exits.
TEST_F(Signals, ALoopThatEndsInAnErrorKeepsItsHandlersWhileTheErrorIsReported) {
  try {
    SignalScope loop;
    throw std::runtime_error("the gradient all-reduce failed: rank 1 stopped");
  } catch (const std::runtime_error&) {
    std::raise(SIGTERM);  // while the error is being reported
  }
  EXPECT_EQ(stop_signal(), SIGTERM);
  EXPECT_EQ(g_previous, 0);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
