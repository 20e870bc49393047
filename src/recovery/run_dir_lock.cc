#include "recovery/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"

namespace strata::recovery {

std::string run_dir_lock_path(const std::string& run_dir) { return run_dir + "/.strata-lock"; }

// The pid written by the holder; 0 when unreadable (the holder has not written it yet).
static long read_holder(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  return n > 0 ? std::strtol(buf, nullptr, 10) : 0;
}

// True when `pid` is this process's parent, grandparent, ...: the launcher of this rank (the
// supervising `strata train`, directly or through mpirun).
static bool is_ancestor(long pid) {
  long p = long(::getppid());
  for (int depth = 0; p > 1 && depth < 64; ++depth) {
    if (p == pid) return true;
    std::ifstream stat("/proc/" + std::to_string(p) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return false;
    const size_t close = line.rfind(')');  // the command name may hold spaces
    if (close == std::string::npos) return false;
    std::istringstream rest(line.substr(close + 1));
    char state = 0;
    long parent = 0;
    rest >> state >> parent;
    p = parent;
  }
  return false;
}

RunDirLock::RunDirLock(const std::string& run_dir) {
  if (run_dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  STRATA_CHECK_SETTING(!ec && std::filesystem::is_directory(run_dir), setting("run-dir"), " ",
                       run_dir, ": cannot create the directory (",
                       ec ? ec.message() : "not a directory", ")");
  const std::string path = run_dir_lock_path(run_dir);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  STRATA_CHECK_SETTING(fd >= 0, setting("run-dir"), " ", run_dir, ": cannot open ", path, ": ",
                       std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const long holder = read_holder(fd);
    ::close(fd);
    if (err == EWOULDBLOCK && holder > 0 && is_ancestor(holder)) return;  // our launcher's lock
    STRATA_CHECK_SETTING(err != EWOULDBLOCK, setting("run-dir"), " ", run_dir,
                         " is in use by another strata train (pid ",
                         holder > 0 ? std::to_string(holder) : std::string("unknown"),
                         "): wait for it to finish, or use another ", setting("run-dir"));
    fail_setting(setting("run-dir"), " ", run_dir, ": cannot lock ", path, ": ",
                 std::strerror(err));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    // The lock holds without the pid; a second job is still refused (pid unknown).
  }
  fd_ = fd;
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race)
}

}  // namespace strata::recovery
