// provenance.h: what produced a run, as HF's and T5X's users expect to find it beside the run:
// thx's version and git commit (with a flag for uncommitted changes, both fixed at build time
// by cmake/version.cmake), the command line, the working directory, the host, its CPU (model and
// bf16 flags) and GPUs, and when the process started.
//
// `thx --version` prints version_line(). A run directory keeps provenance.json, one session per
// invocation that trained in it ({sessions: [{..., started, ended}]}; a session killed without
// a chance to say so has no "ended"), and every checkpoint carries the session that wrote it as
// its "provenance" attribute.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

namespace thx {

// Generated (build/gen/thx_version.cpp).
const char* build_version();  // "0.1.0"
const char* build_commit();   // 12 hex digits, or "unknown" outside a git checkout
bool build_dirty();           // tracked files differed from the commit when thx was built

// "thx 0.1.0 (commit 0123456789ab)", with ", built with uncommitted changes" when dirty.
std::string version_line();

// Called once by main(): the command line to record, and the start time.
void set_command_line(int argc, char** argv);

// This process's record: version, commit, dirty, command, cwd, host, cpu, gpus (where CUDA
// is present), rank (under torchrun), pid, started (UTC, ISO 8601), and the kernel's boot_id and
// count of out-of-memory kills (oom_kills) at its start, which tell a resumed run what ended it.
nlohmann::json session_provenance();

// <dir>/provenance.json ({sessions: [...]}): append this process's session and return its
// index, and in `unended` unended_session's line (or ""); later, add its "ended" time. A file
// that does not parse (edited by hand) is kept aside as provenance.json.unreadable rather than
// lost. Run directories (training/run_dir.h) and sweep directories record their sessions so.
size_t record_session_start(const std::string& dir, std::string* unended = nullptr);
void record_session_end(const std::string& dir, size_t index);

// A resumed run's word on how its last session (of this rank) ended, where provenance.json
// has no "ended" for it: the machine restarted since (another boot_id), Linux's out-of-memory
// killer (/proc/vmstat's oom_kill rose since it started: "most likely", or where the kernel's log
// can be read and names its pid, that it did), or a signal or a crash;
// "" where it ended, or there is none. `sessions` is the file's, `now` this session's record
// (session_provenance(): boot_id, oom_kills where the kernel gives them).
std::string unended_session(const nlohmann::json& sessions, const nlohmann::json& now);

// The current time as UTC ISO 8601 ("2026-11-26T07:30:00Z").
std::string utc_now();

}  // namespace thx
