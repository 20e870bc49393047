#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace strata {

static std::string kind_of(mode_t m) {
  if (S_ISREG(m)) return "a regular file";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

std::string file_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "missing";
  return kind_of(st.st_mode);
}

static void refuse(const std::string& path, const std::string& what, mode_t mode) {
  if (S_ISDIR(mode)) fail(what, " ", path, ": is a directory, not a file");
  fail(what, " ", path, ": is ", kind_of(mode), ", not a regular file");
}

void require_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    fail(what, " ", path, ": ", err == ENOENT ? "does not exist" : std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) refuse(path, what, st.st_mode);
}

void require_replaceable_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return;  // absent (or unreachable: the write says why)
  if (!S_ISREG(st.st_mode)) refuse(path, what, st.st_mode);
}

int open_regular_file(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    fail(what, " ", path, ": ", err == ENOENT ? "does not exist" : std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const mode_t mode = st.st_mode;
    ::close(fd);
    refuse(path, what, mode);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace strata
