// What a failed job's output says about its failure: mpirun's own report of the first
// failing rank or lost host, the ranks' timeout lines, and which host went silent. Pure
// functions of the lines the launcher collected (launcher/launcher.cc), so each is tested alone.
//
// Ranks fill the hosts in order: hosts {a:2, b:2} put ranks 0-1 on a and 2-3 on b.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "launcher/hostlist.h"

namespace strata::launcher {

// mpirun's report of the first failing rank in its untagged lines: "rank R was killed by
// signal S (NAME)" or "rank R exited with code C" (rank, and host when mpirun names it, set),
// or, across hosts, "host H was lost (...)" (host set); "" when it printed none of these.
std::string parse_mpirun_failure(const std::vector<std::string>& lines, bool across_hosts,
                                 int& rank, std::string& host);

// The host of `rank`; "" when there are no hosts or the rank is past their slots.
std::string host_of_rank(const std::vector<HostSlots>& hosts, int rank);

// The failure a restart line leads with, from the first rank's own record (`recorded`, rank
// `rank`; "" when none recorded) and mpirun's report (`mpirun_says`, rank `reported`, host
// `failed_host`): the record, unless it is a survivor's on another host than the one mpirun
// saw fail, which failed because that rank or host went away; then mpirun's report leads,
// "; then " the survivor's record. `rank` becomes the rank the message leads with.
std::string leading_failure(const std::string& recorded, int& rank, const std::string& mpirun_says,
                            int reported, const std::string& failed_host,
                            const std::vector<HostSlots>& hosts);

// The ranks that reported a timeout before mpirun had to be killed (a link cut mid-run: the
// ranks on the far side cannot say anything), each with its host, the peer it waited on when
// its line names one, and that line: "; rank 0 (host a) timed out waiting on rank 1 (host b):
// group world recv #881 with rank 1 tag 0: timed out after 4 s ...". At most four ranks.
std::string timed_out_ranks(const std::vector<std::pair<int, std::string>>& timeouts,
                            const std::vector<HostSlots>& hosts);

// The rank that stopped answering, from the ranks' timeout lines ("strata: rank 0: timeout:
// group world allreduce #7: timed out waiting for rank 1 (...)"; a peer named "(peer: world
// rank W)" is taken as W): each rank that timed out on its own (not relaying a peer's report)
// is followed to the rank at the end of its chain of waits; the end most chains reach is the
// rank that stopped answering (ties: the first line's). Returns
// "rank 1 stopped answering (rank 0 timed out waiting on it in group world allreduce #7)"
// and sets `rank`; "" when no line names a peer other than its own rank.
std::string unanswering_rank(const std::vector<std::pair<int, std::string>>& timeouts, int& rank);

// Whether rank `rank`'s output line shows that it outlived a failure: mpirun's stop (SIGTERM)
// reached it, or it reported a dead peer (its flight recorder's "peer-dead" line). Under load
// mpirun's cleanup may SIGKILL a survivor's rank-exec parent before it records anything, so
// such a line may be the only word from a host that did not die.
bool answers_after_failure(int rank, const std::string& line);

// The one host none of whose ranks answered after the failure (`answered`: the ranks that said
// mpirun's stop reached them, reported a dead peer or recorded how they ended), while ranks
// elsewhere did: its ranks died without a word, with the host. "" when that is not the
// picture (no rank answered, or several hosts stayed silent).
std::string silent_host(const std::vector<int>& answered, const std::vector<HostSlots>& hosts);

}  // namespace strata::launcher
