#include "launcher/run_segments.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "comm/bootstrap.h"
#include "core/error.h"
#include "core/process.h"
#include "launcher/launcher.h"

namespace strata::launcher {

using namespace strata::comm;  // the communication layer this launcher starts ranks of

namespace {

// Run ids are the launcher's (new_job_id): letters, digits and '-'. Anything else is not
// put into a file name or a remote shell's script.
bool safe_id(const std::string& id) {
  return !id.empty() && std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
}

std::string marker_prefix(const std::string& run_id) { return cat("strata-", run_id, "-owns-"); }
constexpr const char kOwnerSuffix[] = "-owner";
std::string owner_record(const std::string& run_id) { return cat("/strata-", run_id, kOwnerSuffix); }

// The launcher's pid that new_job_id put into `run_id` ("j<pid>-<hex>"), or -1.
long owner_pid(const std::string& run_id) {
  const size_t dash = run_id.find('-');
  if (run_id.size() < 3 || run_id[0] != 'j' || dash == std::string::npos || dash < 2 || dash > 10) return -1;
  const std::string digits = run_id.substr(1, dash - 1);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stol(digits);
}

// The names in /dev/shm that start with `prefix`.
std::vector<std::string> shm_names(const std::string& prefix) {
  std::vector<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > prefix.size() && n.compare(0, prefix.size(), prefix) == 0) out.push_back(n);
    }
    closedir(d);
  }
  return out;
}

std::string marker_of(const std::string& name) {
  const std::string run_id = supervised_job_id();
  if (!safe_id(run_id)) return "";
  STRATA_CHECK(name.size() > 1 && name[0] == '/' && name.find('/', 1) == std::string::npos,
               "shared-memory object name '", name, "' is not of the form /NAME");
  return cat("/", marker_prefix(run_id), name.substr(1));
}

}  // namespace

void own_for_run(const std::string& name) {
  const std::string marker = marker_of(name);
  if (marker.empty()) return;
  const int fd = shm_open(marker.c_str(), O_CREAT | O_RDWR, 0600);
  STRATA_CHECK(fd >= 0, "cannot create /dev/shm", marker, " (the job's record that it owns /dev/shm",
               name, "): ", std::strerror(errno));
  close(fd);
}

void disown_for_run(const std::string& name) {
  const std::string marker = marker_of(name);
  if (!marker.empty()) shm_unlink(marker.c_str());
}

int remove_run_owned(const std::string& run_id) {
  if (!safe_id(run_id)) return 0;
  const std::string prefix = marker_prefix(run_id);
  int removed = 0;
  for (const std::string& m : shm_names(prefix)) {
    if (shm_unlink(cat("/", m.substr(prefix.size())).c_str()) == 0) ++removed;
    shm_unlink(cat("/", m).c_str());
  }
  shm_unlink(owner_record(run_id).c_str());
  return removed;
}

void record_run_owner(const std::string& run_id) {
  if (!safe_id(run_id)) return;
  const std::string record = owner_record(run_id);
  const int fd = shm_open(record.c_str(), O_CREAT | O_RDWR, 0600);
  STRATA_CHECK(fd >= 0, "cannot create /dev/shm", record, " (the record that this launcher owns job ", run_id,
               "'s shared-memory objects): ", std::strerror(errno));
  close(fd);
}

std::vector<std::string> remove_orphaned_runs() {
  std::vector<std::string> lines;
  const std::string suffix = kOwnerSuffix;
  for (const std::string& n : shm_names("strata-")) {
    if (n.size() <= 7 + suffix.size() || n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const std::string run_id = n.substr(7, n.size() - 7 - suffix.size());
    const long pid = owner_pid(run_id);
    if (!safe_id(run_id) || pid <= 0 || process_exists(pid)) continue;
    const int removed = remove_run_owned(run_id);
    lines.push_back(cat("job ", run_id, ": launcher pid ", pid, " is gone; removed ", removed,
                        " shared-memory object(s) it owned"));
  }
  return lines;
}

std::vector<std::string> remove_run_owned_on_hosts(const std::string& run_id,
                                                   const std::vector<HostSlots>& hosts,
                                                   const std::string& rsh_agent, double timeout_s) {
  std::vector<std::string> problems;
  if (!safe_id(run_id)) return problems;
  // The shell's version of remove_run_owned: it needs no strata binary on the host.
  const std::string prefix = marker_prefix(run_id);
  const std::string script = cat("cd /dev/shm 2>/dev/null || exit 0; for m in ", prefix,
                                 "*; do [ -e \"$m\" ] || continue; rm -f -- \"${m#", prefix,
                                 "}\" \"$m\"; done");
  for (const HostSlots& h : hosts) {
    if (is_this_host(h.host)) continue;  // remove_run_owned's
    std::string problem;
    run_on_host(h.host, rsh_agent, timeout_s, script, problem);
    if (!problem.empty()) problems.push_back(problem);
  }
  return problems;
}

}  // namespace strata::launcher
