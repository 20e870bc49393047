// Shared-memory objects that a supervised job owns across its attempts (e.g. a rank's
// in-memory checkpoints, recovery/mem_checkpoints.h): they must outlive the rank that made them,
// for the job's restarts, but not the job, however it ends.
//
//   owner    the supervised job, named by STRATA_RUN_ID (launcher/launcher.h: the same in every
//            attempt; an attempt's own segments, named by STRATA_JOB_ID, go with the attempt)
//   marker   an empty object /dev/shm/strata-<run id>-owns-<name> beside each owned object
//            `/<name>`, made by the rank before the object itself, so no owned object exists
//            without its marker
//   cleanup  when the job ends, the launcher removes every owned object and its marker on
//            its own host, and, when the job ran across hosts and any attempt failed (a rank
//            that failed cannot remove its own), on every host through the remote shell
//   orphans  a launcher that is killed (SIGKILL) removes nothing; it recorded itself first as
//            /dev/shm/strata-<run id>-owner (the run id names its pid: "j<pid>-..."), so a
//            later launcher on that host removes what a job whose launcher is gone owned.
//            Hosts where the launcher did not run have no record, and keep theirs.
// A rank that removes its object itself (a run that ended well) removes the marker too.
#pragma once
#include <string>
#include <vector>

#include "launcher/hostlist.h"

namespace strata::launcher {

// Rank side: records that the supervised job owns the shared-memory object `name` ("/x").
// No-op outside a supervised job (no STRATA_RUN_ID). Throws one line when the marker cannot
// be made.
void own_for_run(const std::string& name);
// Rank side: the object `name` was removed by its rank; its marker goes too.
void disown_for_run(const std::string& name);

// Launcher side, this host: removes every object the job `run_id` owns, the markers and the
// owner record; returns how many objects were removed.
int remove_run_owned(const std::string& run_id);
// Launcher side, at its start: records this host's launcher of job `run_id` (a new_job_id).
// Throws one line when the record cannot be made.
void record_run_owner(const std::string& run_id);
// Launcher side: removes what the jobs whose launcher (on this host) is gone own. Returns one
// line per such job ("job j123-...: launcher pid 123 is gone; removed 2 shared-memory
// object(s)").
std::vector<std::string> remove_orphaned_runs();
// Launcher side, across hosts: the same on every host through the remote shell (at most
// timeout_s each); returns one line per host it could not reach.
std::vector<std::string> remove_run_owned_on_hosts(const std::string& run_id,
                                                   const std::vector<HostSlots>& hosts,
                                                   const std::string& rsh_agent, double timeout_s);

}  // namespace strata::launcher
