#include "support/run.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "support/temp_dir.h"

namespace strata::test {

namespace {

// An empty temporary file for one stream of a program; returns its descriptor.
int capture_file(std::string& path) {
  char tmpl[] = "/tmp/strata-test-out-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) throw std::runtime_error("cannot create a temporary output file");
  path = tmpl;
  return fd;
}

}  // namespace

int Proc::exit_code() const {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Proc start(const std::vector<std::string>& argv, const Env& env, Streams streams) {
  Proc p;
  const int out_fd = capture_file(p.out_path);
  const int err_fd = streams == Streams::merged ? out_fd : capture_file(p.err_path);
  p.pid = ::fork();
  if (p.pid < 0) throw std::runtime_error("fork failed");
  if (p.pid == 0) {
    ::setpgid(0, 0);  // so a timeout stops whatever it started too
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    _exit(127);
  }
  ::setpgid(p.pid, p.pid);  // also here: no race with the child's own call
  ::close(out_fd);
  if (err_fd != out_fd) ::close(err_fd);
  return p;
}

bool wait_for(Proc& p, double timeout_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  // A pidfd becomes readable when the program exits, so the wait ends then; polling every
  // 5 ms (where there is no pidfd) added half that to each run of a 25 ms command.
  const int pidfd = int(::syscall(SYS_pidfd_open, p.pid, 0));
  bool done = false;
  for (;;) {
    done = ::waitpid(p.pid, &p.status, WNOHANG) == p.pid;
    const int64_t left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                until - std::chrono::steady_clock::now()).count();
    if (done || left_ms <= 0) break;
    if (pidfd >= 0) {
      pollfd ready{pidfd, POLLIN, 0};
      ::poll(&ready, 1, int(std::min<int64_t>(left_ms + 1, 1000)));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  if (pidfd >= 0) ::close(pidfd);
  if (!done) {
    ::kill(-p.pid, SIGKILL);
    ::waitpid(p.pid, &p.status, 0);
    p.timed_out = true;
  }
  p.out = read_file(p.out_path);
  ::unlink(p.out_path.c_str());
  if (!p.err_path.empty()) {
    p.err = read_file(p.err_path);
    ::unlink(p.err_path.c_str());
  }
  return done;
}

Proc run(const std::vector<std::string>& argv, const Env& env, double timeout_s,
         Streams streams) {
  Proc p = start(argv, env, streams);
  wait_for(p, timeout_s);
  return p;
}

RunResult run_strata(const std::string& args, const std::string& env, Streams streams,
                     double timeout_s) {
  const std::string cmd = env + " " + std::string(STRATA_BINARY) + " " + args;
  Proc p = run({"/bin/sh", "-c", cmd}, {}, timeout_s, streams);
  RunResult r;
  r.status = !p.timed_out && WIFEXITED(p.status) ? WEXITSTATUS(p.status) : -1;
  r.out = std::move(p.out);
  r.err = std::move(p.err);
  return r;
}

}  // namespace strata::test
