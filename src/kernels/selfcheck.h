// A kernel path proves itself on the CPU at hand before a process uses it.
//
// cpuid says what a CPU claims; it does not say that strata's code for it runs (an
// instruction the OS has not enabled, a wrong tile configuration, a compiler defect). So the
// first time a process would choose a path that needs an instruction set (an fp32 ISA level
// above the baseline, a bf16 GEMM path), it runs a small known-answer check of that path in
// a forked child: an illegal instruction, a crash, a hang or a wrong answer there costs the
// child only. A path that fails is passed over (auto) or refused (forced), with one line
// that names it and why; every check a process ran is listed in summary.json.
//
// The child runs the check on its one thread (fork copies only the calling thread, so the
// checks never enter an OpenMP parallel region) and reports by its exit status.
//
// Testing: STRATA_SELFCHECK_FAIL=path[:how][,...] makes the named paths fail their check
// (how: sigill, the default, executes an illegal instruction in the child; wrong reports a
// wrong answer), so every fallback runs on every CPU, including ones without the path.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace strata::kernels {

struct PathCheck {
  std::string path;  // "x86-64-v3", "amx", ...
  bool ok = false;
  std::string why;  // when not ok: "illegal instruction", "wrong answer", "crashed (signal 11)", ...
};

// Runs check (true: the answer is right) in a forked child; at most once per path and
// process (later calls return the first result).
const PathCheck& prove_path(const std::string& path, const std::function<bool()>& check);

// Every check this process ran, in order.
std::vector<PathCheck> path_checks();

// What the choosers passed over, one line each ("amx failed its self-check (illegal
// instruction); using avx512bf16"), for the run's log (the kernels print nothing).
void add_path_note(const std::string& note);
std::vector<std::string> path_notes();

}  // namespace strata::kernels
