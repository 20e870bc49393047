#include "kernels/selfcheck.h"

#include <omp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/env.h"

namespace strata::kernels {

static const EnvVar kFail("STRATA_SELFCHECK_FAIL", "",
                          "testing: kernel paths that fail their self-check, e.g. amx or "
                          "x86-64-v3:wrong (how: sigill, the default, or wrong)");

namespace {

constexpr int kWrongAnswer = 3;
constexpr double kTimeoutS = 60;

std::mutex mu;
std::deque<PathCheck> checks;  // stable addresses: prove_path returns references
std::vector<std::string> notes;

// How the test knob wants this path to fail: "" (it does not), "sigill" or "wrong".
std::string forced_failure(const std::string& path) {
  std::stringstream in(kFail.get());
  for (std::string item; std::getline(in, item, ',');) {
    const auto colon = item.find(':');
    if (item.substr(0, colon) != path) continue;
    return colon == std::string::npos ? "sigill" : item.substr(colon + 1);
  }
  return "";
}

std::string describe(int status) {
  if (WIFEXITED(status)) {
    if (WEXITSTATUS(status) == kWrongAnswer) return "wrong answer";
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    if (sig == SIGILL) return "illegal instruction";
    return std::string("crashed (") + strsignal(sig) + ")";
  }
  return "stopped";
}

PathCheck run_check(const std::string& path, const std::function<bool()>& check) {
  PathCheck r{path, false, ""};
  const std::string fail = forced_failure(path);
  const pid_t pid = ::fork();
  if (pid < 0) {
    r.why = std::string("could not fork its check: ") + std::strerror(errno);
    return r;
  }
  if (pid == 0) {
    omp_set_num_threads(1);
    if (fail == "sigill") __builtin_trap();  // ud2: the illegal instruction a missing unit raises
    const bool ok = fail.empty() && check();
    ::_exit(ok ? 0 : kWrongAnswer);
  }
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) {
      r.why = std::string("lost its check: ") + std::strerror(errno);
      return r;
    }
    if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(kTimeoutS)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      r.why = "timed out";
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  r.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!r.ok) r.why = describe(status);
  return r;
}

}  // namespace

const PathCheck& prove_path(const std::string& path, const std::function<bool()>& check) {
  std::lock_guard<std::mutex> lock(mu);
  for (const PathCheck& c : checks)
    if (c.path == path) return c;
  checks.push_back(run_check(path, check));
  return checks.back();
}

std::vector<PathCheck> path_checks() {
  std::lock_guard<std::mutex> lock(mu);
  return {checks.begin(), checks.end()};
}

void add_path_note(const std::string& note) {
  std::lock_guard<std::mutex> lock(mu);
  notes.push_back(note);
}

std::vector<std::string> path_notes() {
  std::lock_guard<std::mutex> lock(mu);
  return notes;
}

}  // namespace strata::kernels
