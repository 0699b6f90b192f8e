#include "experiments/sweep.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"
#include "common/fs.h"
#include "common/host_memory.h"
#include "common/log.h"
#include "common/provenance.h"
#include "common/runtime.h"
#include "data/prepare.h"
#include "experiments/bench_attention.h"
#include "experiments/results_table.h"
#include "experiments/sweep_results.h"
#include "models/spec.h"
#include "training/checkpoint.h"
#include "training/loop.h"
#include "training/spec.h"

// The process pool of `thx sweep`: every run resolved first, then `jobs` child processes of
// `thx pretrain --resume` at a time, each run's result recorded as it finishes.
namespace thx {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

volatile std::sig_atomic_t g_sweep_stop = 0;
void on_sweep_signal(int sig) { g_sweep_stop = sig; }

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string last;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) last = line;
  return last;
}

}  // namespace

int64_t sweep_resume_step(const std::string& run_dir) {
  const auto found = list_checkpoints((fs::path(run_dir) / "checkpoints").string());
  if (found.empty()) return 0;
  const std::string name = fs::path(found.back()).stem().string();  // step-00000040
  return std::stoll(name.substr(name.find('-') + 1));
}

namespace {

// A run of the sweep, resolved, with where it stands.
struct Planned {
  const SweepRun* run;
  ResolvedRun resolved;
  std::string dir, hash;
  bool finished = false;
  int64_t resume_step = 0;  // newest checkpoint of a started run
  // Model FLOPs of the steps still to run.
  double flops_left() const {
    return finished ? 0 : resolved.flops * double(std::max<int64_t>(0, resolved.steps - resume_step)) /
                              double(std::max<int64_t>(1, resolved.steps));
  }
};

// Every run resolved first (a bad key in any of them stops the sweep before anything runs),
// then checked against what its directory already holds.
std::vector<Planned> plan_runs(const Sweep& sweep, const std::string& out,
                               const std::function<ResolvedRun(ConfigTree&)>& resolve) {
  std::vector<Planned> plan;
  for (const auto& r : sweep.runs) {
    ConfigTree t = sweep_run_tree(sweep, r);
    ResolvedRun resolved;
    try {
      resolved = resolve(t);
    } catch (const InputError& e) {
      // The message names the key and where its value came from; say which run, too.
      const std::string what = e.what();
      throw InputError(what.rfind(sweep.file, 0) == 0
                           ? fmt::format("run '{}': {}", r.name, what)
                           : fmt::format("{}: run '{}': {}", sweep.file, r.name, what));
    }
    Planned p{&r, std::move(resolved), (fs::path(out) / r.name).string(), ""};
    p.hash = fmt::format("{:016x}", fnv1a(p.resolved.yaml));
    plan.push_back(std::move(p));
  }
  // A run directory that holds another config is never reused.
  for (auto& p : plan) {
    const std::string cfg = (fs::path(p.dir) / "run.yaml").string();
    // Compared as this code resolves both (a key added to thx since keeps its default).
    if (fs::exists(cfg) && normalize_pretrain_yaml(read_file(cfg), cfg) != p.resolved.yaml)
      throw InputError(fmt::format("{}: run '{}' was started with another config ({}); the sweep "
                                   "file changed since. Restore it, or use another --out", sweep.file,
                                   p.run->name, cfg));
    p.finished = fs::exists(fs::path(p.dir) / "result.json");
    if (!p.finished) p.resume_step = sweep_resume_step(p.dir);
  }
  return plan;
}

// Runs of `ranks` ranks each: every run's batch must divide, and torchrun must be there.
void check_ranks(const Sweep& sweep, const std::vector<Planned>& plan, int64_t ranks) {
  if (ranks <= 1) return;
  for (const auto& p : plan) {
    const std::string e = batch_split_error("train.batch_size", p.resolved.batch_size, p.resolved.grad_accum, int(ranks));
    if (!e.empty()) throw InputError(fmt::format("{}: run '{}': --ranks-per-run {}: {}", sweep.file, p.run->name, ranks, e));
  }
  if (std::system("command -v torchrun >/dev/null 2>&1") != 0)
    throw InputError("sweep --ranks-per-run: torchrun is not on PATH (Debian: python3-torch; scripts/setup.sh installs it)");
}

// The printed rows of the sweep's table that a run fills (thx table's matching rule).
std::string rows_filled(const Sweep& sweep, const std::vector<PaperRow>& paper, const Planned& p) {
  if (sweep.table.empty()) return "-";
  json r = {{"name", p.run->name}};
  for (const auto& [k, v] : p.resolved.info) r[k] = json::parse(v);
  std::vector<std::string> rows;
  for (const auto& m : match_rows(parse_layout(sweep.table), paper, {r}))
    if (!m.runs.empty()) rows.push_back(fmt::format("{}", m.paper.row));
  return rows.empty() ? std::string("none") : fmt::format("{}", fmt::join(rows, ", "));
}

// The prepared data that runs still to run need and that is not there (no manifest.json):
// each directory once, with the runs that need it, in plan order.
std::vector<std::pair<std::string, std::vector<std::string>>> missing_data(const std::vector<Planned>& plan) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (const auto& p : plan) {
    const std::string& d = p.resolved.prepared;
    if (p.finished || d.empty() || fs::exists(fs::path(d) / "manifest.json")) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& m) { return m.first == d; });
    if (it == out.end()) it = out.insert(out.end(), {d, {}});
    it->second.push_back(p.run->name);
  }
  return out;
}

std::string missing_data_line(const std::pair<std::string, std::vector<std::string>>& m, size_t runs) {
  return fmt::format("{}: data.prepared of {} of the {} runs ({}{}) does not exist (no manifest.json); prepare "
                     "it with: {}", m.first, m.second.size(), runs, m.second.front(),
                     m.second.size() > 1 ? fmt::format(" and {} more", m.second.size() - 1) : "",
                     prepare_command(m.first));
}

// The memory the runs on `device` share ("cpu", "cuda": GPU 0's, as every rank's GPU), in
// bytes (0 where unknown), and what it is, for "more than <what>": --memory-gb's; a GPU's; the
// machine's (or its cgroup's) less the floor thx's memory check keeps available, which no run
// it guards fills (common/host_memory.h).
std::pair<double, std::string> shared_memory(const std::string& device, const SweepOptions& o) {
  if (o.memory_gb > 0) return {o.memory_gb * 1e9, fmt::format("--memory-gb's {:.4g} GB", o.memory_gb)};
  if (device.empty()) return {0, ""};
  const torch::Device d = device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  const double total = memory_bytes(d), floor = d.is_cpu() ? host_memory_floor() : 0;
  if (total <= 0) return {0, ""};
  if (floor <= 0 || floor >= total) return {total, fmt::format("{} {}", memory_owner(d), format_gb(total))};
  return {total - floor, fmt::format("the {} of {} {} that runs may fill (thx's memory check keeps {} free: "
                                     "THX_MEMORY_FLOOR_MB)",
                                     format_gb(total - floor), memory_owner(d), format_gb(total), format_gb(floor))};
}

// The bounds (sweep_run_memory) of the plan's runs, by their device ("cpu", "cuda"; a run whose
// device the sweep cannot tell is left out), all of them or (`to_run`) those not finished.
std::map<std::string, std::vector<double>> bounds_by_device(const std::vector<Planned>& plan, int64_t ranks,
                                                            bool to_run) {
  std::map<std::string, std::vector<double>> needs;
  for (const auto& p : plan)
    if (!p.resolved.device.empty() && !(to_run && p.finished))
      needs[p.resolved.device].push_back(sweep_run_memory(p.resolved, ranks));
  return needs;
}

std::string on_device(const std::string& device) { return device == "cuda" ? "on the GPU" : "on the CPU"; }

// The most runs of the plan that memory lets run at once, at most `jobs`: on each device, its
// smallest bounds added up while they fit (at least one run, which its own check then
// judges), since a run starts only beside runs that fit with it. Where that is fewer than
// `jobs`, the line that says so. All the plan's runs count, finished or not, so that a
// resumed sweep gives its runs the same threads.
std::pair<int64_t, std::string> jobs_memory_allows(const std::vector<Planned>& plan, const SweepOptions& o,
                                                   int64_t jobs, int64_t ranks) {
  int64_t k = 0;  // runs at once, over the devices; a run on a device not known is not limited
  for (const auto& p : plan) k += p.resolved.device.empty();
  std::string why;
  for (auto& [device, bytes] : bounds_by_device(plan, ranks, false)) {
    const auto [budget, what] = shared_memory(device, o);
    std::sort(bytes.begin(), bytes.end());
    double sum = 0;
    size_t fit = 0;
    while (fit < bytes.size() && (budget <= 0 || sum + bytes[fit] <= budget)) sum += bytes[fit++];
    k += int64_t(std::max<size_t>(1, fit));
    const std::string on = on_device(device);
    if (fit == bytes.size() || int64_t(fit) >= jobs) continue;
    why = fit == 0 ? fmt::format("no run {} fits alone in {}", on, what)
                   : fmt::format("at most {} of these runs {} fit{} in memory at once (the {} smallest need at least "
                                 "{} together, more than {})", fit, on, fit == 1 ? "s" : "", fit + 1,
                                 format_gb(sum + bytes[fit]), what);
  }
  if (k >= jobs) return {jobs, ""};
  return {k, fmt::format("--jobs {}: {}: {} at a time", jobs, why, k)};
}

// What the dry run says of memory, where it matters (each run's bound is in its table): runs
// that cannot fit even alone, which their own check stops at their start; and where the --jobs
// largest of the others need more together than their device has, that fewer then run at once.
void print_memory_note(const std::vector<Planned>& plan, const SweepOptions& o, int64_t jobs, int64_t ranks) {
  for (auto& [device, bytes] : bounds_by_device(plan, ranks, true)) {
    const auto [budget, what] = shared_memory(device, o);
    if (budget <= 0) continue;
    std::sort(bytes.rbegin(), bytes.rend());
    const double have = budget;  // (a lambda may not capture a structured binding in C++17)
    const auto fit = std::find_if(bytes.begin(), bytes.end(), [have](double b) { return b <= have; });
    const std::string on = on_device(device);
    if (const auto over = size_t(fit - bytes.begin()); over > 0)
      std::printf("\nMemory: %zu of the %zu runs to run %s need%s alone more than %s (up to %.4g GB): %s "
                  "with one line that says what to change.\n", over, bytes.size(), on.c_str(), over == 1 ? "s" : "",
                  what.c_str(), bytes.front() / 1e9, over == 1 ? "it stops" : "each stops");
    double largest = 0;
    int64_t k = 0;
    for (auto it = fit; it != bytes.end() && k < jobs; ++it, ++k) largest += *it;
    if (k >= 2 && largest > budget)
      std::printf("\nMemory: the %lld largest runs %s that fit alone need at least %.4g GB together, more than "
                  "%s: a run starts beside others only where theirs fit, so fewer than %lld run at once at times.\n",
                  (long long)k, on.c_str(), largest / 1e9, what.c_str(), (long long)k);
  }
}

// --dry-run: the plan as a table, and the time the runs left would take here.
void print_dry_run(const Sweep& sweep, const std::vector<Planned>& plan, const std::string& out,
                   const SweepOptions& o, int64_t jobs, int64_t ranks, const std::string& fewer) {
  double flops_left = 0, flops_all = 0;
  for (const auto& p : plan) flops_all += p.resolved.flops, flops_left += p.flops_left();
  std::printf("sweep %s (%s): %zu runs into %s\n", sweep.name.c_str(), sweep.file.c_str(), plan.size(), out.c_str());
  std::vector<PaperRow> paper;
  if (!sweep.table.empty()) paper = load_paper_rows(default_tables_csv());
  std::printf("| run | steps | attention | fills %s row | memory GB, at least | model PFLOP | state |\n"
              "|---|---:|---|---|---:|---:|---|\n", sweep.table.empty() ? "-" : sweep.table.c_str());
  for (const auto& p : plan) {
    const std::string state = p.finished ? "finished"
                              : p.resume_step > 0 ? fmt::format("resumes at step {}", p.resume_step)
                                                  : "to run";
    const double memory = sweep_run_memory(p.resolved, ranks);
    std::printf("| %s | %lld | %s | %s | %s | %.3f | %s |\n", p.run->name.c_str(), (long long)p.resolved.steps,
                p.resolved.attention.c_str(), rows_filled(sweep, paper, p).c_str(),
                memory > 0 ? fmt::format("{:.3g}", memory / 1e9).c_str() : "-", p.resolved.flops / 1e15,
                state.c_str());
  }
  // Each precision's FLOPs at the fraction of its own matmul peak that mini steps reach at one
  // thread per job (docs/benchmarks.md): fp32 45-72%; bf16 29-44% (an EPYC with AVX512-BF16).
  std::map<std::string, double> left;
  for (const auto& p : plan) left[p.resolved.precision] += p.flops_left();
  const std::map<std::string, double> share = {{"fp32", 0.5}, {"bf16", 0.3}};
  double seconds = 0;
  std::string at;
  // Measured once a process per precision and thread count (a test dry-runs many sweeps).
  static std::map<std::pair<std::string, int64_t>, double> peaks;
  for (const auto& [precision, flops] : left) {
    const std::pair<std::string, int64_t> key{precision, int64_t(torch::get_num_threads())};
    if (!peaks.count(key)) peaks[key] = matmul_peak_gflops(1024, 3, precision) * 1e9;
    const double peak = peaks.at(key);
    seconds += flops / (share.at(precision) * peak);
    at += fmt::format("{}{:.0f}% of this machine's {} matmul peak ({:.0f} GFLOP/s)", at.empty() ? "" : " and ",
                      100 * share.at(precision), precision, peak / 1e9);
  }
  if (!fewer.empty()) std::printf("\nMemory: %s.\n", fewer.c_str());
  print_memory_note(plan, o, jobs, ranks);
  for (const auto& m : missing_data(plan))
    std::printf("\nMissing data: %s; those runs cannot start until it is there.\n", missing_data_line(m, plan.size()).c_str());
  const long long threads = torch::get_num_threads();
  std::printf("\nTo run: %.3f of %.3f PFLOP of model FLOPs, about %s on %lld thread%s at %s, measured now "
              "(the share mini steps reach at one thread per job, docs/benchmarks.md).\n",
              flops_left / 1e15, flops_all / 1e15, format_duration(seconds).c_str(), threads, threads == 1 ? "" : "s",
              at.c_str());
}

// One sweep process per directory, for its lifetime. The lock is not inherited by the runs
// (O_CLOEXEC): a run left behind by a killed sweep, still saving its checkpoint, must not keep
// the next sweep out (that sweep waits for the run's own directory lock instead). The holder's
// pid is in the file, for the message.
class SweepLock {
 public:
  explicit SweepLock(const std::string& out) : fd_(try_lock_directory(out)) {
    if (fd_ < 0)
      throw InputError(fmt::format("{}: another thx sweep{} is running on this directory; wait for it or stop it "
                                   "(its runs checkpoint and stop on SIGTERM)", out, lock_holder(out)));
    std::string unended;  // <out>/provenance.json: who ran the sweep, and when
    session_ = record_session_start(out_ = out, &unended);
    if (!unended.empty()) thx::log("sweep")->warn("{}: {}", out, unended);
  }
  ~SweepLock() {
    try {
      record_session_end(out_, session_);
    } catch (const std::exception& e) {
      thx::log("sweep")->warn("{}: could not record the end time in provenance.json: {}", out_, e.what());
    }
    ::close(fd_);
  }
  SweepLock(const SweepLock&) = delete;
  SweepLock& operator=(const SweepLock&) = delete;

 private:
  std::string out_;
  int fd_ = -1;
  size_t session_ = 0;
};

// A run that ended without a result but at a checkpoint: stopped by SIGINT or SIGTERM (thx
// exits 128 + N then), or exit 0 from a thx before that rule.
bool stopped_at_checkpoint(int status) {
  if (!WIFEXITED(status)) return false;
  const int code = WEXITSTATUS(status);
  return code == 0 || code == 128 + SIGINT || code == 128 + SIGTERM;
}

// SIGINT/SIGTERM set g_sweep_stop while it lives, without SA_RESTART, so that a signal
// interrupts waitpid() and the runs hear of it at once.
struct SweepSignals {
  struct sigaction old_int {}, old_term {};
  SweepSignals() {
    g_sweep_stop = 0;
    struct sigaction sa {};
    sa.sa_handler = on_sweep_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
  }
  ~SweepSignals() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  }
};

// Starts `thx pretrain --resume` of a run (under torchrun with ranks > 1), its output in the
// run's stdout.log; returns the child's pid.
pid_t launch_run(const Planned& p, const SweepOptions& o, int64_t threads, int64_t ranks) {
  fs::create_directories(p.dir);
  const std::string cfg = (fs::path(p.dir) / "run.yaml").string();
  if (!fs::exists(cfg)) write_file_atomic(cfg, p.resolved.yaml);
  const std::string log_path = (fs::path(p.dir) / "stdout.log").string();
  std::vector<std::string> args;
  // Debian 12's torchrun needs --redirects/--tee of one stream (README). Not --standalone:
  // its rendezvous is always port 29400, where a second run at once would join the first's;
  // each run's own store on a free loopback port instead (torchrun's documented way). The ranks'
  // logs go to the run's torchrun/ (without --log_dir torchrun makes a torchelastic_* folder in
  // TMPDIR for them at every launch and never removes it).
  if (ranks > 1)
    args = {"torchrun", "--nnodes", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:0", "--rdzv_id",
            p.run->name, "--nproc_per_node", std::to_string(ranks), "--redirects", "2", "--tee", "2",
            "--log_dir", (fs::path(p.dir) / "torchrun").string(), "--no_python"};
  // The sweep's own --device goes to every run (a run's train.device still decides).
  args.insert(args.end(), {o.thx_binary, "--threads", std::to_string(threads), "--device", device_request(),
                           "pretrain", "--config", cfg, "--run-dir", p.dir, "--resume"});
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw RunError(fmt::format("sweep: cannot start a process: {}", std::strerror(errno)));
  if (pid == 0) {
    // If the sweep dies (even by SIGKILL), its runs get SIGTERM: they checkpoint and stop,
    // so a restarted sweep never finds two processes in one run directory.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);
    std::signal(SIGINT, SIG_DFL), std::signal(SIGTERM, SIG_DFL);
    const int fd = ::open(log_path.c_str(), O_CREAT | O_WRONLY | O_APPEND, 0644);
    if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// A run's process ended after `wall` seconds: its wall time added up over sessions, and when
// it finished, its result.json. Returns its held-out ln(PPL) if the run is finished now.
std::optional<double> record_result(Planned& p, const Sweep& sweep, int status, double wall) {
  // Wall time accumulates over the sessions a run took.
  const std::string wall_path = (fs::path(p.dir) / "wall_s.txt").string();
  double wall_total = wall;
  if (fs::exists(wall_path)) wall_total += std::atof(read_file(wall_path).c_str());
  write_file_atomic(wall_path, fmt::format("{:.1f}\n", wall_total));
  bool finished = false;
  json r = summarize_metrics(p.dir, p.resolved.steps, &finished);
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0 && finished)) return std::nullopt;
  r["name"] = p.run->name;
  r["sweep"] = sweep.name;
  if (!p.run->variant.empty()) r["variant"] = p.run->variant;
  if (!p.run->budget.empty()) r["budget"] = p.run->budget;
  if (p.run->seed) r["seed"] = *p.run->seed;
  r["steps"] = p.resolved.steps;
  r["wall_s"] = std::round(wall_total * 10) / 10;
  r["config_hash"] = p.hash;
  for (const auto& [k, v] : p.resolved.info) r[k] = json::parse(v);
  write_file_atomic((fs::path(p.dir) / "result.json").string(), r.dump() + "\n");
  return r.value("ln_ppl", 0.0);
}

void write_results(const std::string& out, const std::vector<Planned>& plan) {
  std::vector<std::string> dirs;
  for (const auto& p : plan) dirs.push_back(p.dir);
  write_results_jsonl(out, dirs);
}

// The sweep's end: results.jsonl of every finished run, and what did not finish.
void report_end(const Sweep& sweep, const std::vector<Planned>& plan, const std::string& out,
                const std::vector<std::string>& failures) {
  write_results(out, plan);
  size_t finished = 0;
  for (const auto& p : plan) finished += p.finished;
  auto log = thx::log("sweep");
  log->info("{}: {} of {} runs finished; results in {}", sweep.name, finished, plan.size(),
            (fs::path(out) / "results.jsonl").string());
  for (const auto& f : failures) log->error("failed: {}", f);
}

// A run's error names the line of the run.yaml the sweep wrote for it ("RUN/run.yaml:7:
// model.d_ff ..."); the line to change is the sweep file's (or its base's) that set the key,
// added after it: "RUN/run.yaml:7 (from sweep.yaml:12): model.d_ff ...".
std::string with_sweep_origin(const std::string& why, const Sweep& sweep, const Planned& p) {
  const std::string at = (fs::path(p.dir) / "run.yaml").string() + ":";
  const size_t line = why.find(at);
  const size_t colon = line == std::string::npos ? line : why.find(": ", line + at.size());
  if (colon == std::string::npos) return why;
  const size_t end = why.find_first_of(" :", colon + 2);
  const std::string key = why.substr(colon + 2, end == std::string::npos ? end : end - colon - 2);
  if (key.find('.') == std::string::npos) return why;
  std::string origin;
  try {
    origin = sweep_run_tree(sweep, *p.run).origin(key);
  } catch (const std::exception&) {  // the sweep file changed since it started: say nothing more
    return why;
  }
  if (origin.empty() || origin == "defaults") return why;
  return fmt::format("{} (from {}){}", why.substr(0, colon), origin, why.substr(colon));
}

// Logs a run that failed (its pid and wait status; the out-of-memory killer's kills while it
// ran) and returns "<name> (<how it ended>): <why>" for the sweep's end. A run's error is its log's last
// line; a run killed mid-step has none, only where the next sweep resumes it. A run that ran out
// of memory beside others (`jobs` > 1) is told that they share it, which its own line cannot know.
std::string report_failure(const Sweep& sweep, const Planned& p, pid_t pid, int status, int64_t oom_kills_during,
                           int64_t jobs) {
  const int64_t resume = sweep_resume_step(p.dir);
  const std::string log = (fs::path(p.dir) / "stdout.log").string();
  std::string why = !WIFSIGNALED(status) ? with_sweep_origin(last_line(log), sweep, p)
                    : resume > 0 ? fmt::format("the next `thx sweep` resumes it at step {}", resume)
                                 : "the next `thx sweep` starts it again (it had no checkpoint)";
  const std::string how = child_end(status, oom_kills_during, pid);
  if (jobs > 1 && oom_kills_during <= 0 && why.find("out of memory") != std::string::npos &&
      why.find("THX_MEMORY_LIMIT_MB") == std::string::npos)  // (that cap is each process's own)
    why += fmt::format(" (it ran beside up to {} other run{} of this sweep (--jobs {}), which share the machine's "
                       "memory: fewer at a time gives each more)", jobs - 1, jobs == 2 ? "" : "s", jobs);
  thx::log("sweep")->error("{} failed ({}): {}", p.run->name, how, why);
  return fmt::format("{} ({}): {}", p.run->name, how, why);
}

// A run the sweep has started.
struct Child {
  size_t index;  // in the plan
  pid_t pid;
  std::chrono::steady_clock::time_point start;
  int64_t oom_kills;  // the kernel's count when it started (common/host_memory.h)
};

// sweep_memory_wait's line for the plan's run `next` beside the runs now `running`.
std::string memory_wait(const std::vector<Planned>& plan, const std::vector<Child>& running, size_t next,
                        int64_t ranks, const SweepOptions& o) {
  const ResolvedRun& r = plan[next].resolved;
  std::vector<double> beside;
  for (const Child& c : running)
    if (plan[c.index].resolved.device == r.device) beside.push_back(sweep_run_memory(plan[c.index].resolved, ranks));
  const auto [budget, what] = shared_memory(r.device, o);
  return sweep_memory_wait(plan[next].run->name, sweep_run_memory(r, ranks), beside, budget, what);
}

}  // namespace

double sweep_run_memory(const ResolvedRun& r, int64_t ranks) {
  const double n = double(std::max<int64_t>(1, ranks));
  MemoryBound rank = r.memory;  // each rank's: its parameters, gradients and state, its share of the batch
  rank.activations /= n;
  if (n > 1) rank.buckets = rank.gradients;  // c10d's Reducer's
  return r.device == "cuda" ? rank.total() : n * rank.total();
}

std::string sweep_memory_wait(const std::string& name, double need, const std::vector<double>& beside,
                              double budget, const std::string& what) {
  double others = 0;
  for (const double b : beside) others += b;
  if (beside.empty() || need <= 0 || budget <= 0 || need + others <= budget) return "";
  const size_t k = beside.size();
  return fmt::format("{} waits for memory: it needs at least {}, beside the {} of the {} run{} now running: {} "
                     "together, more than {}; it starts when {} (lower bounds of what each holds while it trains; "
                     "`thx sweep --dry-run` lists them)",
                     name, format_gb(need), format_gb(others), k, k == 1 ? "" : "s", format_gb(need + others), what,
                     k == 1 ? "that run ends" : "one of them ends");
}

SweepOutcome run_sweep(const Sweep& sweep, const SweepOptions& o,
              const std::function<ResolvedRun(ConfigTree&)>& resolve) {
  auto log = thx::log("sweep");
  const std::string out = o.out_dir.empty() ? (fs::path("runs") / sweep.name).string() : o.out_dir;
  check_output_dir(out, "--out");
  if (o.jobs < 1) throw InputError(fmt::format("--jobs {}: must be at least 1", o.jobs));
  std::vector<Planned> plan = plan_runs(sweep, out, resolve);
  const int64_t cores = o.threads > 0 ? o.threads : available_cores();
  const int64_t ranks = std::max<int64_t>(1, o.ranks_per_run);
  const auto [jobs, fewer] =
      jobs_memory_allows(plan, o, std::min<int64_t>(o.jobs, std::max<int64_t>(1, int64_t(plan.size()))), ranks);
  const int64_t threads = std::max<int64_t>(1, cores / (jobs * ranks));
  check_ranks(sweep, plan, ranks);
  if (o.dry_run) return print_dry_run(sweep, plan, out, o, jobs, ranks, fewer), SweepOutcome{};
  if (const auto missing = missing_data(plan); !missing.empty())  // every run would fail: start none
    throw InputError(fmt::format("{}: {}", sweep.file, missing_data_line(missing.front(), plan.size())));

  create_output_dir(out, "--out");
  const SweepLock lock(out);
  write_file_atomic((fs::path(out) / "sweep.yaml").string(), read_file(sweep.file));
  std::vector<Child> running;
  std::vector<std::string> failures;
  size_t next = 0, done = 0, todo = 0, waiting = plan.size();
  double flops_left = 0, flops_done = 0;
  for (const auto& p : plan) todo += !p.finished, flops_left += p.flops_left();
  if (!fewer.empty()) log->info("{}", fewer);
  log->info("{}: {} runs, {} finished, {} to run; {} at a time, {}{} thread{} each; into {}", sweep.name,
            plan.size(), plan.size() - todo, todo, jobs, ranks > 1 ? fmt::format("{} ranks of ", ranks) : "",
            threads, threads == 1 ? "" : "s", out);
  const SweepSignals signals;
  const auto t0 = std::chrono::steady_clock::now();
  bool forwarded = false;
  while (true) {
    if (g_sweep_stop && !forwarded) {
      log->warn("stopping: the runs save a checkpoint and exit; run the same command to resume");
      for (const auto& c : running) kill(c.pid, SIGTERM);
      forwarded = true;
    }
    for (; !g_sweep_stop && int64_t(running.size()) < jobs && next < plan.size(); ++next) {
      if (plan[next].finished) continue;
      if (const std::string wait = memory_wait(plan, running, next, ranks, o); !wait.empty()) {
        if (waiting != next) log->info("{}", wait), waiting = next;  // once a run
        break;
      }
      running.push_back(
          {next, launch_run(plan[next], o, threads, ranks), std::chrono::steady_clock::now(), oom_kills()});
      log->info("[{}/{}] started {} ({})", done + running.size(), todo, plan[next].run->name,
                plan[next].resolved.attention);
    }
    if (running.empty()) break;
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;
    auto it = std::find_if(running.begin(), running.end(), [&](const Child& c) { return c.pid == pid; });
    if (it == running.end()) continue;
    Planned& p = plan[it->index];
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - it->start).count();
    const int64_t kills = oom_kills(), oom_during = it->oom_kills >= 0 && kills >= 0 ? kills - it->oom_kills : 0;
    running.erase(it);
    const double ran = p.flops_left();  // what this sweep ran of it, if it finished
    if (const auto ln_ppl = record_result(p, sweep, status, wall)) {
      p.finished = true, flops_done += ran, ++done;
      write_results(out, plan);
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double eta = flops_done > 0 ? elapsed / flops_done * (flops_left - flops_done) : 0;
      log->info("[{}/{}] finished {}: ln(PPL) {:.4f}, {} | ETA {}", done, todo, p.run->name, *ln_ppl,
                format_duration(wall), format_duration(eta));
    } else if (stopped_at_checkpoint(status) || g_sweep_stop) {
      log->warn("{}: stopped at a checkpoint; the next `thx sweep` resumes it", p.run->name);
    } else {  // it does not run again in this sweep: the time left is the others'
      flops_left -= ran;
      failures.push_back(report_failure(sweep, p, pid, status, oom_during, jobs));
    }
  }
  report_end(sweep, plan, out, failures);
  return {int(failures.size()), int(g_sweep_stop)};
}

}  // namespace thx
