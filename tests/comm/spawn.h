// Starting processes from tests: run a command to completion capturing its output, or start
// several ranks with their own environment and collect them.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace strata::comm::testing {

struct Proc {
  pid_t pid = -1;
  std::string out_path;
  int status = 0;
  std::string output() const {
    std::ifstream f(out_path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }
};

// Starts argv with extra environment; stdout and stderr go to a temporary file.
inline Proc start(const std::vector<std::string>& argv,
                  const std::vector<std::pair<std::string, std::string>>& env = {}) {
  Proc p;
  char tmpl[] = "/tmp/strata-comm-out-XXXXXX";
  int fd = mkstemp(tmpl);
  p.out_path = tmpl;
  p.pid = fork();
  if (p.pid == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    for (auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fd);
  return p;
}

// Waits up to timeout_s (then SIGKILLs it and records that).
inline bool wait_for(Proc& p, double timeout_s = 60) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    if (waitpid(p.pid, &p.status, WNOHANG) == p.pid) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(p.pid, SIGKILL);
  waitpid(p.pid, &p.status, 0);
  return false;
}

inline Proc run(const std::vector<std::string>& argv,
                const std::vector<std::pair<std::string, std::string>>& env = {},
                double timeout_s = 60) {
  Proc p = start(argv, env);
  wait_for(p, timeout_s);
  return p;
}

inline std::string temp_dir() {
  char tmpl[] = "/tmp/strata-comm-test-XXXXXX";
  return mkdtemp(tmpl);
}

}  // namespace strata::comm::testing
