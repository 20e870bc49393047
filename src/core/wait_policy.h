// How strata's OpenMP threads wait between parallel regions.
//
// libgomp, left to its defaults, spins GOMP_SPINCOUNT = 300000 `pause` iterations (several
// milliseconds on current x86 cores) at every barrier and at the end of every parallel region
// before it sleeps on a futex. On an idle host that buys a little latency; on a host whose cores
// other work also wants, every waiting thread burns its whole spin while the thread it waits for
// is descheduled, and a training step costs 2-3x the CPU time and more wall time than in a quiet
// run (docs/training.md, "Threads and waiting"). strata therefore starts with a short spin
// (kDefaultSpinCount) unless the user chose a policy with OMP_WAIT_POLICY or GOMP_SPINCOUNT.
//
// libgomp reads its environment once, in its own constructor, before any of strata's code runs,
// and no OpenMP routine changes the wait policy afterwards. So the `strata` executable, from its
// .preinit_array (which the dynamic loader runs before any library's constructor), re-executes
// itself once with GOMP_SPINCOUNT added to the environment (src/cli/main.cc). The variable is
// inherited, so ranks and restarts that strata starts do not re-execute.
#pragma once
#include <string>
#include <vector>

namespace strata {

// Spins before a waiting OpenMP thread sleeps: 1000 `pause`s, tens of microseconds, for the
// fork-join hand-offs of a quiet run, short enough that a descheduled peer costs little.
inline constexpr const char* kDefaultSpinCount = "1000";

// The environment `envp` (null-terminated, as execve takes it) with the default spin count
// added, or an empty vector when the user already chose (OMP_WAIT_POLICY or GOMP_SPINCOUNT
// set, even to an empty value). The strings are owned by the result.
std::vector<std::string> env_with_wait_policy(char* const* envp);

// Re-executes /proc/self/exe with argv and env_with_wait_policy(envp) when that is not empty;
// returns (and the process runs on with libgomp's defaults) only when nothing needs changing
// or execve failed. Meant for the executable's .preinit_array: no library is initialised yet.
void reexec_with_wait_policy(char** argv, char** envp);

}  // namespace strata
