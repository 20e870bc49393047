#include "comm/bootstrap.h"

#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "core/env.h"
#include "core/error.h"
#include "core/timer.h"

namespace strata::comm {

static const EnvVar kRank("STRATA_RANK", "", "this process's rank (set by strata launch)");
static const EnvVar kWorld("STRATA_WORLD_SIZE", "", "number of ranks (set by strata launch)");
static const EnvVar kLocalRank("STRATA_LOCAL_RANK", "", "rank on this host (set by strata launch)");
static const EnvVar kLocalWorld("STRATA_LOCAL_WORLD_SIZE", "",
                                "ranks on this host (set by strata launch)");
static const EnvVar kJobId("STRATA_JOB_ID", "",
                           "unique job name; shared-memory segments are named after it");

static const EnvVar kLauncherPid("STRATA_LAUNCHER_PID", "",
                                 "pid of the strata launcher that started this rank (set by strata "
                                 "launch; tells its ranks from leftover STRATA_RANK variables)");

static const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

static int parse_int(const char* name, const char* v, int min_value) {
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  STRATA_CHECK(end && *end == '\0' && x >= min_value && x < (1L << 30), "environment variable ",
               name, "='", v, "' is not a valid ", min_value > 0 ? "size" : "rank");
  return int(x);
}

namespace {
struct Scheme {
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};
}  // namespace

static const Scheme kSchemes[] = {
    {"strata", "STRATA_RANK", "STRATA_WORLD_SIZE", "STRATA_LOCAL_RANK", "STRATA_LOCAL_WORLD_SIZE"},
    {"ompi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
};

bool launched_as_rank() {
  for (const Scheme& s : kSchemes)
    if (env(s.rank) && env(s.size)) return true;
  return false;
}

// The parent of process `pid` from /proc/<pid>/stat, or -1.
static long parent_of(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), {});
  size_t close = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 1));
  char state;
  long ppid = -1;
  rest >> state >> ppid;
  return ppid;
}

bool strata_rank_env_is_stale() {
  if (!env("STRATA_RANK") || !env("STRATA_WORLD_SIZE")) return false;
  const std::string v = kLauncherPid.get();
  char* end = nullptr;
  long launcher = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end || launcher <= 1) return true;
  long p = long(getppid());
  for (int depth = 0; depth < 32 && p > 1; ++depth, p = parent_of(p))  // a wrapper shell may sit between
    if (p == launcher) return false;
  return true;
}

std::string strata_rank_env_text() {
  std::string s;
  for (const char* name : {"STRATA_RANK", "STRATA_WORLD_SIZE", "STRATA_JOB_ID"})
    if (const char* v = env(name)) s += cat(s.empty() ? "" : " ", name, "=", v);
  return s;
}

void refuse_stale_rank_env(const std::string& request) {
  STRATA_CHECK(!strata_rank_env_is_stale(), request, ": the environment holds ", strata_rank_env_text(),
               ", but no strata launcher started this process (left over from another job?); "
               "unset them to start the ranks here");
}

static std::string job_id_for(const std::string& source) {
  if (const char* v = env("STRATA_JOB_ID")) return v;
  if (source == "ompi") {
    for (const char* name : {"OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE"})
      if (const char* v = env(name)) return std::string("ompi-") + v;
  }
  if (source == "slurm" || source == "pmi") {
    if (const char* j = env("SLURM_JOB_ID")) {
      const char* step = env("SLURM_STEP_ID");
      return std::string("slurm-") + j + "." + (step ? step : "0");
    }
  }
  if (source == "torchrun") {
    if (const char* v = env("TORCHELASTIC_RUN_ID")) {
      const char* restart = env("TORCHELASTIC_RESTART_COUNT");
      return std::string("torch-") + v + "." + (restart ? restart : "0");
    }
    if (const char* port = env("MASTER_PORT")) return std::string("torch-port") + port;
  }
  return "";
}

RankEnv detect_rank_env() {
  RankEnv r;
  for (const Scheme& s : kSchemes) {
    const char* rank = env(s.rank);
    const char* size = env(s.size);
    if (!rank || !size) continue;
    r.source = s.source;
    r.rank = parse_int(s.rank, rank, 0);
    r.world_size = parse_int(s.size, size, 1);
    STRATA_CHECK(r.rank < r.world_size, s.rank, "=", r.rank, " is not below ", s.size, "=",
                 r.world_size);
    const char* lr = env(s.local_rank);
    const char* ls = env(s.local_size);
    // SLURM_NTASKS_PER_NODE may read "4(x2)"; only a plain number is trusted.
    r.local_rank = lr ? parse_int(s.local_rank, lr, 0) : r.rank;
    r.local_world_size = r.world_size;
    if (ls) {
      char* end = nullptr;
      long v = std::strtol(ls, &end, 10);
      if (end && *end == '\0' && v >= 1) r.local_world_size = int(v);
    }
    r.job_id = job_id_for(r.source);
    return r;
  }
  if (const char* j = env("STRATA_JOB_ID")) r.job_id = j;
  return r;
}

static const EnvVar kRestart("STRATA_RESTART", "0",
                             "how many times the supervisor (--max-restarts) has restarted this "
                             "job; set by the launcher for its ranks");

int restart_attempt() {
  const int64_t k = kRestart.get_int();
  STRATA_CHECK(k >= 0, "STRATA_RESTART must be >= 0, got ", k);
  return int(k);
}

static const EnvVar kRunId("STRATA_RUN_ID", "",
                           "the supervised job's id, the same in every restart of it (STRATA_JOB_ID "
                           "is fresh per attempt); set by the launcher for its ranks");

std::string supervised_job_id() { return kRunId.get(); }

std::string new_job_id() {
  std::random_device rd;
  uint64_t r = (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(now_ns());
  char buf[64];
  std::snprintf(buf, sizeof buf, "j%d-%012llx", int(getpid()),
                (unsigned long long)(r & 0xffffffffffffull));
  return buf;
}

int remove_job_segments(const std::string& job_id) {
  if (job_id.empty()) return 0;
  std::string prefix = "strata-" + job_id + "-";
  int removed = 0;
  DIR* d = opendir("/dev/shm");
  if (!d) return 0;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) == 0 && shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

}  // namespace strata::comm
