// The emulator of common/cuda_compat.h run in its serialized orders (emu::Order): a kernel that
// reads another thread's shared memory without a barrier between gives different results when
// the threads take turns in ascending and in descending order, across warps and within a warp,
// and the same results once the barrier is there (also where the reader is ldmatrix, which is no
// barrier). A warp barrier that not every lane reaches stops the launch with a message instead
// of hanging, and so does a write outside shared memory. Asynchronous copies land at their wait.
// CTest runs every suite that uses the emulator in both orders (cmake/gtest_suites.cmake's list
// names each).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/cuda_compat.h"
#include "common/cuda_mma.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

// Thread t writes t + 1 to shared[t], then reads shared[partner(t)] into out[t], with __syncthreads
// (block) or thx_syncwarp (warp) between or nothing; 64 threads.
std::vector<int> exchange(emu::Order order, int (*partner)(int), bool block_barrier, bool warp_barrier) {
  emu::ScopedOrder in(order);
  std::vector<int> out(64, 0);
  emu::launch({1, 1, 1}, 64, 64 * sizeof(int), [&] {
    THX_SHARED(bytes);
    int* s = reinterpret_cast<int*>(bytes);
    const int t = int(threadIdx.x);
    s[t] = t + 1;
    if (block_barrier) __syncthreads();
    if (warp_barrier) thx_syncwarp();
    out[size_t(t)] = s[partner(t)];
  });
  return out;
}
int other_warp(int t) { return (t + 32) % 64; }
int next_lane(int t) { return t / 32 * 32 + (t + 1) % 32; }

TEST(Emulator, SerializedOrdersShowARaceAcrossWarps) {
  const auto asc = exchange(emu::Order::ascending, other_warp, false, false);
  const auto desc = exchange(emu::Order::descending, other_warp, false, false);
  EXPECT_NE(asc, desc);
  EXPECT_EQ(asc[32], 1);   // warp 0 ran first: warp 1 sees its values
  EXPECT_EQ(desc[32], -1);  // warp 1 ran first: the buffer's NaN bytes
  // A warp barrier does not order two warps; the block's barrier does.
  EXPECT_NE(exchange(emu::Order::ascending, other_warp, false, true),
            exchange(emu::Order::descending, other_warp, false, true));
  const auto fixed = exchange(emu::Order::ascending, other_warp, true, false);
  EXPECT_EQ(fixed, exchange(emu::Order::descending, other_warp, true, false));
  EXPECT_EQ(fixed, exchange(emu::Order::concurrent, other_warp, true, false));
  EXPECT_EQ(fixed[0], 33);
}

TEST(Emulator, SerializedOrdersShowARaceWithinAWarp) {
  EXPECT_NE(exchange(emu::Order::ascending, next_lane, false, false),
            exchange(emu::Order::descending, next_lane, false, false));
  const auto fixed = exchange(emu::Order::ascending, next_lane, false, true);
  EXPECT_EQ(fixed, exchange(emu::Order::descending, next_lane, false, true));
  EXPECT_EQ(fixed[31], 1);
}

// Lane l stores row (l + 1) % 32 of four 8x8 bf16 matrices, then ldmatrix.x4 reads them (lane l
// giving row l's address), with thx_syncwarp between or not.
std::vector<uint32_t> ldmatrix_rows(emu::Order order, bool warp_barrier) {
  emu::ScopedOrder in(order);
  std::vector<uint32_t> out(32 * 4, 0);
  emu::launch({1, 1, 1}, 32, 32 * 16, [&] {
    THX_SHARED(bytes);
    uint16_t* s = reinterpret_cast<uint16_t*>(bytes);
    const int l = int(threadIdx.x);
    for (int c = 0; c < 8; ++c) s[(l + 1) % 32 * 8 + c] = uint16_t(100 * l + c);
    if (warp_barrier) thx_syncwarp();
    thx_ldmatrix<4, false>(&out[size_t(4 * l)], s + 8 * l);
  });
  return out;
}

TEST(Emulator, LdmatrixOrdersNoStoreBeforeIt) {
  EXPECT_NE(ldmatrix_rows(emu::Order::ascending, false), ldmatrix_rows(emu::Order::descending, false));
  const auto fixed = ldmatrix_rows(emu::Order::ascending, true);
  EXPECT_EQ(fixed, ldmatrix_rows(emu::Order::descending, true));
  EXPECT_EQ(fixed[0], 3100u | 3101u << 16);  // lane 0: matrix 0, row 0 (lane 31's), columns 0 and 1
}

TEST(Emulator, ABarrierNotEveryLaneReachesStopsTheLaunch) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto diverge = [] {
    emu::ScopedOrder in(emu::Order::ascending);
    emu::launch({1, 1, 1}, 32, 0, [] {
      if (threadIdx.x != 0) thx_syncwarp();
    });
  };
  EXPECT_DEATH(diverge(), "a barrier that not all reach");
}

// A write one byte past shared memory's end, or before its start, stops the launch (a GPU faults).
TEST(Emulator, AWriteOutsideSharedMemoryStopsTheLaunch) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto write_at = [](int offset) {
    emu::launch({2, 1, 1}, 32, 64, [offset] {
      THX_SHARED(bytes);
      if (threadIdx.x == 5 && blockIdx.x == 1) bytes[offset] = 1;
    });
  };
  write_at(63);  // inside: fine
  EXPECT_DEATH(write_at(64), "a kernel wrote byte 64 of a block's 64 bytes of shared memory");
  EXPECT_DEATH(write_at(-3), "a kernel wrote byte -3 of a block's 64 bytes of shared memory");
}

// Asynchronous copies (thx_cp_async16) land only when a wait covers their group: lane l copies
// global word 16 l.. into shared slot l, then reads its own slot before any wait (the old bytes,
// as a GPU may show), after waiting for all but the newest group (the first group only) and after
// waiting for all; lanes then read their neighbour's slot across a warp barrier. A thread that
// ends its block with copies not waited for stops the launch.
TEST(Emulator, AsynchronousCopiesLandAtTheirWait) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<uint32_t> global(32 * 4 * 2);
  for (size_t i = 0; i < global.size(); ++i) global[i] = uint32_t(1000 + i);
  std::vector<uint32_t> seen(32 * 4, 0);
  const int64_t before = emu::async_copies;
  emu::launch({1, 1, 1}, 32, 2 * 32 * 16, [&] {
    THX_SHARED(bytes);
    uint32_t* s = reinterpret_cast<uint32_t*>(bytes);
    const int l = int(threadIdx.x);
    s[4 * l] = 7u, s[128 + 4 * l] = 8u;
    thx_cp_async16(s + 4 * l, &global[size_t(4 * l)]);
    thx_cp_async_commit();
    thx_cp_async16(s + 128 + 4 * l, &global[size_t(128 + 4 * l)]);
    thx_cp_async_commit();
    seen[size_t(4 * l)] = s[4 * l];  // no wait yet: 7
    thx_cp_async_wait<1>();          // the first group: landed; the second: not yet
    seen[size_t(4 * l) + 1] = s[4 * l] * 10000u + s[128 + 4 * l];
    thx_cp_async_wait<0>();
    thx_syncwarp();
    seen[size_t(4 * l) + 2] = s[128 + 4 * ((l + 1) % 32)];
  });
  EXPECT_EQ(emu::async_copies - before, 64);
  for (int l = 0; l < 32; ++l) {
    EXPECT_EQ(seen[size_t(4 * l)], 7u) << l;
    EXPECT_EQ(seen[size_t(4 * l) + 1], uint32_t(1000 + 4 * l) * 10000u + 8u) << l;
    EXPECT_EQ(seen[size_t(4 * l) + 2], uint32_t(1000 + 128 + 4 * ((l + 1) % 32))) << l;
  }
  auto unwaited = [&] {
    emu::launch({1, 1, 1}, 32, 32 * 16, [&] {
      THX_SHARED(bytes);
      thx_cp_async16(bytes + 16 * threadIdx.x, &global[size_t(4 * threadIdx.x)]);
      thx_cp_async_commit();
    });
  };
  EXPECT_DEATH(unwaited(), "asynchronous copies not waited for");
}

// THX_EMU_ORDER names an order or is refused in one line, exit 2.
TEST(Emulator, AnUnknownOrderIsOneLine) {
  emu::ScopedOrder unset(emu::Order(-1));  // (-1: the environment decides)
  auto launch_with = [](const char* order) {
    setenv("THX_EMU_ORDER", order, 1);
    emu::launch({1, 1, 1}, 32, 0, [] {});
    std::exit(0);
  };
  EXPECT_EXIT(launch_with("descending"), testing::ExitedWithCode(0), "");
  EXPECT_EXIT(launch_with("sideways"), testing::ExitedWithCode(2),
              "THX_EMU_ORDER=sideways: allowed are concurrent, ascending, descending");
}

// The suites of the test files that launch on the emulator (emu::launch, or the launchers of
// rows_emulator.h and th_emulator.h), but those that run on a GPU (OnCuda), and those that
// cmake/gtest_suites.cmake names to run in both orders.
std::set<std::string> emulated_suites(const std::filesystem::path& root) {
  std::set<std::string> out;
  const std::regex suite(R"(\nTEST(?:_F)?\((\w+),)");
  for (const auto& e : std::filesystem::recursive_directory_iterator(root / "tests")) {
    if (!e.is_regular_file() || e.path().extension() != ".cpp") continue;
    std::stringstream text;
    text << std::ifstream(e.path()).rdbuf();
    const std::string s = "\n" + text.str();
    if (s.find("emu::launch") == std::string::npos && s.find("rows_emulator.h") == std::string::npos &&
        s.find("th_emulator.h") == std::string::npos)
      continue;
    for (std::sregex_iterator m(s.begin(), s.end(), suite), end; m != end; ++m)
      if ((*m)[1].str().find("OnCuda") == std::string::npos) out.insert((*m)[1].str());
  }
  return out;
}
std::set<std::string> listed_suites(const std::filesystem::path& root) {
  std::ifstream in(root / "cmake" / "gtest_suites.cmake");
  std::string line;
  std::set<std::string> out;
  while (std::getline(in, line))
    for (const std::string head : {"set(emulated ", "list(APPEND emulated "})
      if (line.rfind(head, 0) == 0) {
        std::istringstream words(line.substr(head.size(), line.find(')') - head.size()));
        for (std::string w; words >> w;) out.insert(w);
      }
  return out;
}

TEST(Emulator, EveryEmulatedSuiteRunsInBothOrders) {
  const std::filesystem::path root(THX_SOURCE_DIR);
  const std::set<std::string> found = emulated_suites(root);
  // The check finds them:
  EXPECT_TRUE(found.count("Flash") && found.count("Emulator") && found.count("RmsNormEmulated"));
  EXPECT_EQ(found, listed_suites(root));
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
