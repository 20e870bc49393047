#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

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

static std::string errno_text(int err) { return std::strerror(err); }

std::string read_regular_file(const std::string& path, const std::string& what) {
  const int fd = open_regular_file(path, what);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail("cannot read ", what, " ", path, ": ", errno_text(err));
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

void write_fully(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t w = ::write(fd, p + done, bytes - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("cannot write ", path, ": ", errno_text(w < 0 ? errno : EIO));
    done += size_t(w);
  }
}

static std::string parent_dir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void atomic_write_file(const std::string& path, const std::string& data) {
  atomic_write_file(path, std::vector<std::string_view>{data});
}

void atomic_write_file(const std::string& path, const std::vector<std::string_view>& parts) {
  // The rename below would replace a device node (/dev/full) or fail on a directory after
  // the whole file was written: refuse such a target before writing anything.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail(path, ": is ", kind_of(st.st_mode), ", not a regular file: not replacing it");
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd < 0) fail("cannot create ", tmp, ": ", errno_text(errno));
  try {
    // <path>.tmp itself may be a FIFO or device left there: never write into one.
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) fail(tmp, ": is ", kind_of(st.st_mode), ", not a regular file");
    for (std::string_view part : parts) write_fully(fd, part.data(), part.size(), tmp);
    if (::fsync(fd) != 0) fail("fsync ", tmp, ": ", errno_text(errno));
  } catch (...) {
    ::close(fd);
    if (S_ISREG(st.st_mode)) ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail("close ", tmp, ": ", errno_text(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail("cannot rename ", tmp, " to ", path, ": ", errno_text(err));
  }
  // Some filesystems refuse fsync on directories (EINVAL); their renames are then as durable
  // as they get.
  const std::string dir = parent_dir(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) fail("cannot open directory ", dir, " to fsync: ", errno_text(errno));
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL) fail("fsync directory ", dir, ": ", errno_text(err));
}

LineLog::LineLog(const std::string& path, bool append, const std::string& what) : path_(path) {
  require_replaceable_file(path, what);  // a FIFO would block the open, a device eat the lines
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (append ? O_APPEND : O_TRUNC),
               0644);
  if (fd_ < 0) fail("cannot write ", what, " ", path, ": ", errno_text(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {  // replaced between the check and open
    const mode_t mode = st.st_mode;
    ::close(fd_);
    fd_ = -1;
    refuse(path, what, mode);
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
}

LineLog::LineLog(LineLog&& o) noexcept : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)) {}

LineLog& LineLog::operator=(LineLog&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
  }
  return *this;
}

LineLog::~LineLog() {
  if (fd_ >= 0) ::close(fd_);
}

void LineLog::write_line(std::string_view line) {
  STRATA_CHECK(fd_ >= 0, "internal: write to a closed log");
  std::string rec(line);
  rec += '\n';
  write_fully(fd_, rec.data(), rec.size(), path_);  // one write(2): whole records under O_APPEND
}

std::string quote_input(std::string_view text, size_t max_chars) {
  std::string q = "'";
  size_t used = 0;
  for (; used < text.size(); ++used) {
    if (q.size() - 1 >= max_chars) break;
    const unsigned char c = static_cast<unsigned char>(text[used]);
    if (c == '\\' || c == '\'') {
      q += '\\';
      q += char(c);
    } else if (c >= 0x20 && c < 0x7f) {
      q += char(c);
    } else if (c == '\t') {
      q += "\\t";
    } else if (c == '\n') {
      q += "\\n";
    } else if (c == '\r') {
      q += "\\r";
    } else {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      q += b;
    }
  }
  if (used == text.size()) return q + "'";
  return q + "...' (" + std::to_string(text.size()) + " bytes)";
}

std::string cap_long_words(std::string_view line, size_t max_word) {
  std::string out;
  for (size_t at = 0; at < line.size();) {
    const size_t end = std::min(line.find_first_of(" \t\n", at), line.size());
    std::string_view word = line.substr(at, end - at);
    if (word.size() > max_word)
      out += std::string(word.substr(0, max_word)) + "...(" + std::to_string(word.size()) + " chars)";
    else
      out += word;
    if (end < line.size()) out += line[end];
    at = end + 1;
  }
  return out;
}

}  // namespace strata
