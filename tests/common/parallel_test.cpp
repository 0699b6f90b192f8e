// thx::parallel_for (common/parallel.h) against ATen's rules for at::parallel_for: with two
// threads a range is split into ATen's chunks (divup of the range by min(threads, range /
// grain)), each on its own OS thread with at::get_thread_num() equal to its chunk's index; a
// range no larger than the grain, a nested call and one thread run serially on the caller's
// thread; an exception in a chunk comes back to the caller. Built with clang (no OpenMP code
// generation for libgomp) at::parallel_for itself would fail the first test: one thread.
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

#include "common/parallel.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

struct Chunk {
  int64_t begin, end;
  int thread_num;
  std::thread::id os_thread;
};

std::vector<Chunk> chunks_of(int64_t begin, int64_t end, int64_t grain) {
  std::mutex m;
  std::vector<Chunk> got;
  thx::parallel_for(begin, end, grain, [&](int64_t a, int64_t b) {
    std::lock_guard<std::mutex> lock(m);
    got.push_back({a, b, at::get_thread_num(), std::this_thread::get_id()});
  });
  std::sort(got.begin(), got.end(), [](const Chunk& x, const Chunk& y) { return x.begin < y.begin; });
  return got;
}

struct Threads {  // sets ATen's intra-op thread count, restores it after
  int before = at::get_num_threads();
  explicit Threads(int n) { at::set_num_threads(n); }
  ~Threads() { at::set_num_threads(before); }
};

TEST(Parallel, SplitsLikeATenOnePerThread) {
  Threads two(2);
  const std::vector<Chunk> c = chunks_of(0, 1000, 1);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(std::tie(c[0].begin, c[0].end, c[0].thread_num), std::make_tuple(int64_t(0), int64_t(500), 0));
  EXPECT_EQ(std::tie(c[1].begin, c[1].end, c[1].thread_num), std::make_tuple(int64_t(500), int64_t(1000), 1));
  EXPECT_NE(c[0].os_thread, c[1].os_thread);  // two threads ran, not one twice
  // 10 iterations at grain 8: min(2 threads, divup(10, 8) = 2) chunks of divup(10, 2) = 5.
  const std::vector<Chunk> g = chunks_of(3, 13, 8);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(std::tie(g[0].begin, g[0].end, g[1].begin, g[1].end),
            std::make_tuple(int64_t(3), int64_t(8), int64_t(8), int64_t(13)));
  // An odd range: chunks of divup(7, 2) = 4, the last one short.
  const std::vector<Chunk> odd = chunks_of(0, 7, 1);
  ASSERT_EQ(odd.size(), 2u);
  EXPECT_EQ(std::tie(odd[0].end, odd[1].begin, odd[1].end), std::make_tuple(int64_t(4), int64_t(4), int64_t(7)));
}

TEST(Parallel, SerialWhereATenIsSerial) {
  Threads two(2);
  const std::thread::id me = std::this_thread::get_id();
  for (auto [begin, end, grain] : {std::tuple<int64_t, int64_t, int64_t>{0, 8, 8}, {0, 1, 0}, {5, 6, 1}}) {
    const std::vector<Chunk> c = chunks_of(begin, end, grain);
    ASSERT_EQ(c.size(), 1u) << begin << ".." << end << " grain " << grain;
    EXPECT_EQ(std::tie(c[0].begin, c[0].end, c[0].thread_num), std::make_tuple(begin, end, 0));
    EXPECT_EQ(c[0].os_thread, me);
  }
  EXPECT_TRUE(chunks_of(4, 4, 1).empty());
  // Nested: the inner call runs serially inside each outer chunk, on that chunk's thread.
  std::mutex m;
  std::set<std::pair<int64_t, int64_t>> inner;
  thx::parallel_for(0, 2, 1, [&](int64_t a, int64_t) {
    const std::vector<Chunk> c = chunks_of(0, 100, 1);
    std::lock_guard<std::mutex> lock(m);
    for (const Chunk& x : c) inner.insert({a, x.end - x.begin});
  });
  EXPECT_EQ(inner, (std::set<std::pair<int64_t, int64_t>>{{0, 100}, {1, 100}}));
  Threads one(1);
  const std::vector<Chunk> c = chunks_of(0, 1000, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].os_thread, me);
}

TEST(Parallel, AnExceptionInAChunkReachesTheCaller) {
  Threads two(2);
  EXPECT_THROW(thx::parallel_for(0, 100, 1,
                                 [](int64_t a, int64_t) {
                                   if (a >= 50) throw std::runtime_error("second chunk");
                                 }),
               std::runtime_error);
  int64_t sum = 0;  // and the next region runs normally
  std::mutex m;
  thx::parallel_for(0, 100, 1, [&](int64_t a, int64_t b) {
    std::lock_guard<std::mutex> lock(m);
    for (int64_t i = a; i < b; ++i) sum += i;
  });
  EXPECT_EQ(sum, 4950);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
