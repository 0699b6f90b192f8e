// scripts/ninja_replay.py (a finished build replayed on N workers: what a GPU machine's build
// waits for) on a hand-made build: two files compile while a generated header is made, a third
// file waits for the header, then the link. Times worked out by hand for 1, 2 and 3 workers, the
// chain that ends last, a subset of targets, and bad input in one line, exit 2.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/fs.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {
namespace fs = std::filesystem;

RunResult replay(const fs::path& dir, const std::string& args) {
  return run_command(test_python() + " " + std::string(THX_SOURCE_DIR) + "/scripts/ninja_replay.py " + dir.string() +
                     " " + args + " 2>&1");
}

TEST(NinjaReplay, ReplaysTheLoggedStepsOnNWorkersAndNamesTheChain) {
  TempDir dir;
  std::ofstream(dir.path / "build.ninja") << "rule cc\n  command = cc $in\n"
                                             "build a.o: cc a.c\n"
                                             "build b.o: cc b.c\n"
                                             "build c.o: cc c.c || gen.h\n"
                                             "build gen.h: cc gen.proto\n"
                                             "build app: cc a.o b.o c.o\n"
                                             "build all: phony app\n";
  // start and end in ms: a.o 4 s, b.o 3, c.o 2, gen.h 5, app 1 (as logged, in any order)
  std::ofstream(dir.path / ".ninja_log") << "# ninja log v5\n0\t4000\t0\ta.o\t1\n0\t3000\t0\tb.o\t2\n"
                                            "3000\t8000\t0\tgen.h\t3\n8000\t10000\t0\tc.o\t4\n"
                                            "10000\t11000\t0\tapp\t5\n";
  // One worker: everything in turn. Two: a and b, then the header (b's worker, at 3 s), c at 8,
  // the link at 10. Three: a, b and the header at once, c at 5, the link at 7.
  for (const auto& [workers, expected] : std::vector<std::pair<int, std::string>>{
           {1, "1 workers: 15.0 s (the steps sum to 15.0 s)"},
           {2, "2 workers: 11.0 s"},
           {3, "3 workers: 8.0 s"}}) {
    const RunResult r = replay(dir.path, "--workers " + std::to_string(workers));
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find(expected), std::string::npos) << r.out;
  }
  // The bounds: the chain header, c, link takes 8 s on enough workers; 15 s of steps on 2 is 7.5 each.
  const RunResult two = replay(dir.path, "--workers 2");
  EXPECT_NE(two.out.find("bounds: 8.0 s with a worker for every step, 7.5 s of steps per worker"), std::string::npos)
      << two.out;
  const RunResult chain = replay(dir.path, "--workers 3 --chain");
  EXPECT_NE(chain.out.find("      8.0 s     1.0 s  app\n      7.0 s     2.0 s  c.o\n      5.0 s     5.0 s  gen.h\n"),
            std::string::npos)
      << chain.out;
  EXPECT_EQ(chain.out.find("a.o"), std::string::npos) << chain.out;

  // Only what b.o needs (3 s), or the link needs (all but the phony `all`: 15 s on one worker).
  const RunResult b = replay(dir.path, "--workers 1 --targets b.o");
  EXPECT_NE(b.out.find("1 workers: 3.0 s (the steps sum to 3.0 s)"), std::string::npos) << b.out;
  const RunResult c = replay(dir.path, "--workers 2 --targets c.o a.o");
  EXPECT_NE(c.out.find("2 workers: 7.0 s (the steps sum to 11.0 s)"), std::string::npos) << c.out;
  const RunResult unknown = replay(dir.path, "--targets b.o nope");
  EXPECT_EQ(unknown.code, 2) << unknown.out;
  EXPECT_NE(unknown.out.find("--targets nope: no step of "), std::string::npos) << unknown.out;
  EXPECT_EQ(std::count(unknown.out.begin(), unknown.out.end(), '\n'), 1) << unknown.out;

  fs::remove(dir.path / ".ninja_log");
  const RunResult missing = replay(dir.path, "");
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_NE(missing.out.find(".ninja_log: no such file"), std::string::npos) << missing.out;
  EXPECT_EQ(std::count(missing.out.begin(), missing.out.end(), '\n'), 1) << missing.out;
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
