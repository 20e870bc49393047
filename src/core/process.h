// Processes of this host, as cleanup of what a dead process left behind needs them.
#pragma once
#include <signal.h>

#include <cerrno>

namespace strata {

// Whether process `pid` exists on this host: kill(pid, 0) does not say ESRCH (EPERM, another
// user's process, counts as existing). A recycled pid reads as existing, so what it guards is
// kept rather than removed under a live owner.
inline bool process_exists(long pid) { return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno != ESRCH); }

}  // namespace strata
