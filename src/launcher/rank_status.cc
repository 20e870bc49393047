#include "launcher/rank_status.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>

#include "comm/bootstrap.h"
#include "core/error.h"
#include "core/timer.h"

namespace strata::launcher {

using namespace strata::comm;  // the communication layer this launcher starts ranks of

static volatile sig_atomic_t g_child = 0;

extern "C" void strata_forward_signal(int sig) {
  if (g_child > 0) kill(pid_t(g_child), sig);
}

int exec_and_record_status(const std::string& dir, const std::vector<std::string>& command) {
  STRATA_CHECK(!command.empty(), "rank-exec needs a program to run");
  const int rank = detect_rank_env().rank;
  pid_t pid = fork();
  STRATA_CHECK(pid >= 0, "rank-exec: fork failed: ", std::strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive this parent
    std::vector<char*> argv;
    for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "strata rank-exec: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  g_child = pid;
  struct sigaction sa {};
  sa.sa_handler = strata_forward_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  {
    std::ofstream out(dir + "/rank-" + std::to_string(rank));
    out << status << " " << now_ns() << "\n";
  }
  if (WIFSIGNALED(status)) {
    signal(WTERMSIG(status), SIG_DFL);
    raise(WTERMSIG(status));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

std::string first_recorded_failure(const std::string& dir, int& rank) {
  rank = -1;
  int64_t first_t = INT64_MAX;
  int first_status = 0;
  for (int r : recorded_ranks(dir)) {
    std::ifstream in(dir + "/rank-" + std::to_string(r));
    int status = 0;
    int64_t t = 0;
    if (!(in >> status >> t)) continue;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && t < first_t) {
      first_t = t;
      first_status = status;
      rank = r;
    }
  }
  return rank < 0 ? "" : cat("rank ", rank, " ", describe_wait_status(first_status));
}

std::vector<int> recorded_ranks(const std::string& dir) {
  std::vector<int> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    int r = -1;
    if (std::sscanf(e->d_name, "rank-%d", &r) == 1 && r >= 0) out.push_back(r);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return cat("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return cat("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  return "stopped";
}

std::string self_executable() {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  STRATA_CHECK(n > 0, "cannot read /proc/self/exe: ", std::strerror(errno));
  return std::string(exe, size_t(n));
}

}  // namespace strata::launcher
