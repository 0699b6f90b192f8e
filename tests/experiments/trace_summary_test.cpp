// scripts/trace_summary.py (a GPU step's Kineto trace read on the CPU machines) on a hand-made
// trace: the GPU's busy time as a union of overlapping kernels, the idle gaps charged to the part
// of the step that launched the kernel after them, the launch-to-start delays, and bad input as
// one line, exit 2.
#include <fstream>

#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

RunResult summarize(const std::string& args) {
  return run_command("/usr/bin/python3 " + std::string(THX_SOURCE_DIR) + "/scripts/trace_summary.py " + args +
                     " 2>&1");
}

// (ts and dur as written: numbers in microseconds)
std::string event(const std::string& cat, const std::string& name, const std::string& ts, const std::string& dur,
                  const std::string& args) {
  return "{\"ph\": \"X\", \"cat\": \"" + cat + "\", \"name\": \"" + name + "\", \"pid\": 1, \"tid\": 1, \"ts\": " + ts +
         ", \"dur\": " + dur + ", \"args\": {" + args + "}}";
}
std::string event(const std::string& cat, const std::string& name, double ts, double dur, const std::string& args) {
  return event(cat, name, std::to_string(ts), std::to_string(dur), args);
}

// Forward [0, 40] us, backward [40, 300], optimizer [300, 350] on the CPU. Kernels (ts, end):
// a product (15, 45) with a copy inside it (20, 30) on another stream, an add (45, 50) that the
// forward launched and the GPU ran once the CPU was in the backward (it is the forward's); the
// backward's product (160, 260), launched from another thread; the optimizer's add (320, 330).
std::string trace() {
  const std::vector<std::string> e = {
      event("user_annotation", "thx::forward", 0, 40, ""),
      event("user_annotation", "thx::backward", 40, 260, ""),
      event("user_annotation", "thx::optimizer", 300, 50, ""),
      event("cpu_op", "aten::mm", 9, 2, "\"External id\": 11"),
      event("cpu_op", "aten::add", 19, 2, "\"External id\": 12"),
      event("cpu_op", "aten::copy_", 17, 2, "\"External id\": 15"),
      event("cpu_op", "aten::mm", 149, 2, "\"External id\": 13"),
      event("cpu_op", "aten::add_", 309, 2, "\"External id\": 14"),
      event("cuda_runtime", "cudaLaunchKernel", 10, 1, "\"correlation\": 1, \"External id\": 11"),
      event("cuda_runtime", "cudaLaunchKernel", 20, 1, "\"correlation\": 2, \"External id\": 12"),
      event("cuda_runtime", "cudaMemcpyAsync", 18, 1, "\"correlation\": 5, \"External id\": 15"),
      event("cuda_runtime", "cudaLaunchKernel", 150, 1, "\"correlation\": 3, \"External id\": 13"),
      event("cuda_runtime", "cudaLaunchKernel", 310, 1, "\"correlation\": 4, \"External id\": 14"),
      event("kernel", "void gemm_kernel<float>(int)", 15, 30, "\"correlation\": 1"),
      event("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 20, 10, "\"correlation\": 5"),
      event("kernel", "void add_kernel(int)", 45, 5, "\"correlation\": 2"),
      event("kernel", "void gemm_kernel<float>(int)", 160, 100, "\"correlation\": 3"),
      event("kernel", "void (anonymous namespace)::adafactor(float*)", 320, 10, "\"correlation\": 4"),
  };
  std::string s = "{\"traceEvents\": [";
  for (size_t i = 0; i < e.size(); ++i) s += (i ? ",\n" : "\n") + e[i];
  return s + "]}";
}

TEST(TraceSummary, IdleGapsAreChargedToThePartThatLaunchedTheNextKernel) {
  TempDir dir;
  const std::string path = dir.write("step.json", trace());
  const RunResult r = summarize(path);
  ASSERT_EQ(r.code, 0) << r.out;
  // Span 15..330 us; kernels summed 155 us, as a union 145 (the copy overlaps the product); idle 170.
  EXPECT_NE(r.out.find("5 kernels, copies and fills over 0.315 ms on the GPU; their time summed 0.155 ms, as a "
                       "union 0.145 ms; idle 0.170 ms (54%)"),
            std::string::npos)
      << r.out;
  // The forward's delays from launch to start: 5, 2 and 25 us (median 5); the backward's idle is the
  // 110 us gap before its product, the optimizer's the 60 before its add.
  EXPECT_NE(r.out.find("| forward | 3 | 0.045 | 0.000 | 5.0 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| backward | 1 | 0.100 | 0.110 | 10.0 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| optimizer | 1 | 0.010 | 0.060 | 10.0 |"), std::string::npos) << r.out;
  EXPECT_LT(r.out.find("| forward |"), r.out.find("| backward |"));
  EXPECT_NE(r.out.find("2 gaps of 20 us or more, 0.170 ms"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 0.145 | 110.0 | backward | gemm_kernel<float> | aten::mm |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 0.305 | 60.0 | optimizer | {anon}::adafactor | aten::add_ |"), std::string::npos) << r.out;
  // A higher threshold keeps only the longest gap.
  const RunResult r2 = summarize(path + " --gap-us 100");
  EXPECT_NE(r2.out.find("1 gaps of 100 us or more, 0.110 ms"), std::string::npos) << r2.out;
}

// Kineto writes times since 1970 in microseconds to the nanosecond (16 digits and 3 decimals), more
// than a float keeps (a quarter of a microsecond there): they are read exactly. A kernel launched at
// .050 that starts at .350 waited 0.3 us, where floats would have said 0.25.
TEST(TraceSummary, TimesSince1970AreReadToTheNanosecond) {
  const std::string at = "1796000000002000";
  const std::vector<std::string> e = {
      event("user_annotation", "thx::forward", at + ".000", "10.000", ""),
      event("cpu_op", "aten::mm", at + ".010", "0.500", "\"External id\": 21"),
      event("cuda_runtime", "cudaLaunchKernel", at + ".050", "0.100", "\"correlation\": 7, \"External id\": 21"),
      event("kernel", "void gemm_kernel<float>(int)", at + ".350", "1.250", "\"correlation\": 7")};
  const std::string text = "{\"traceEvents\": [" + e[0] + ", " + e[1] + ", " + e[2] + ", " + e[3] + "]}";
  TempDir dir;
  const RunResult r = summarize(dir.write("ns.json", text));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| forward | 1 | 0.001 | 0.000 | 0.3 |"), std::string::npos) << r.out;
}

TEST(TraceSummary, BadInputIsOneLineExitTwo) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"not.json", "{\"traceEvents\": ["}, {"empty.json", "{\"other\": 1}"}, {"cpu.json", "{\"traceEvents\": []}"},
      {"ts.json", "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", \"ts\": \"1.5\"}]}"},
      {"dur.json", "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", \"ts\": 1, \"dur\": true}]}"}};
  for (const auto& [name, text] : bad) {
    const RunResult r = summarize(dir.write(name, text));
    EXPECT_EQ(r.code, 2) << name << ": " << r.out;
    EXPECT_EQ(lines(r.out), 1) << name << ": " << r.out;
    EXPECT_NE(r.out.find(name), std::string::npos) << r.out;
  }
  const RunResult missing = summarize((dir.path / "missing.json.gz").string());
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_EQ(lines(missing.out), 1) << missing.out;
  const RunResult top = summarize(dir.write("t.json", trace()) + " --top 0");
  EXPECT_EQ(top.code, 2) << top.out;
  EXPECT_EQ(top.out, "trace_summary.py: --top 0: allowed: 1 or more\n");
  const RunResult unknown = summarize(dir.file("t.json") + " --bogus");  // argparse's own errors too
  EXPECT_EQ(unknown.code, 2) << unknown.out;
  EXPECT_EQ(lines(unknown.out), 1) << unknown.out;
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
