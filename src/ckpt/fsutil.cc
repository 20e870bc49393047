#include "ckpt/fsutil.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/files.h"

namespace fs = std::filesystem;

namespace strata::ckpt {

std::string errno_text(int err) { return std::strerror(err); }

std::string ckpt_root(const std::string& run_dir) { return run_dir + "/ckpt"; }

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%06lld", (long long)step);
  return buf;
}

std::optional<int64_t> parse_step_dir(const std::string& name) {
  if (name.size() < 11 || name.compare(0, 5, "step-") != 0) return std::nullopt;
  const std::string digits = name.substr(5);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 18)
    return std::nullopt;
  return std::stoll(digits);
}

std::vector<int64_t> list_steps(const std::string& root) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    auto s = parse_step_dir(e.path().filename().string());
    // One that cannot be resolved (a symbolic link loop) is listed too: reading it then says
    // why, naming it, and the newest good one is found past it.
    std::error_code bad;
    if (s && (e.is_directory(bad) || bad)) steps.push_back(*s);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<std::string> read_latest(const std::string& root) {
  const std::string path = root + "/latest";
  const std::string kind = file_kind(path);
  if (kind == "missing") return std::nullopt;
  // Checked before opening: a FIFO here would block the open forever.
  if (kind != "a regular file") fail(path, ": malformed pointer (", kind, ", not a file naming a step-* directory)");
  std::ifstream in(path);
  if (!in) fail(path, ": unreadable pointer (", errno_text(errno), ")");
  std::string name;
  std::getline(in, name);
  if (parse_step_dir(name)) return name;
  // Random bytes are never echoed: they may not be text, and the message travels into JSON.
  const bool text = name.size() <= 40 && std::all_of(name.begin(), name.end(), [](char c) {
                      return c >= 0x20 && c < 0x7f;
                    });
  if (text) fail(path, ": malformed pointer '", name, "' (not a step-* directory name)");
  fail(path, ": malformed pointer (", fs::file_size(path), " bytes that are not a step-* directory name)");
}

std::string repair_latest(const std::string& root, const std::string& name) {
  std::string problem;
  try {
    const auto latest = read_latest(root);
    std::error_code ec;
    if (!latest || fs::is_directory(root + "/" + *latest, ec)) return "";
    problem = cat(root, "/latest names ", *latest, ", which does not exist");
  } catch (const std::exception& e) {
    problem = e.what();
  }
  std::error_code ec;
  if (!fs::is_regular_file(root + "/latest")) fs::remove_all(root + "/latest", ec);  // a FIFO, a directory
  atomic_write_file(root + "/latest", name + "\n");
  return problem;
}

std::string unresolvable(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 || errno == ENOENT || errno == ENOTDIR) return "";
  return cat(path, ": ", errno_text(errno));
}

void make_dirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create ", dir, ": ", ec.message());
  if (!fs::is_directory(dir)) fail("cannot create ", dir, ": exists and is not a directory");
}

void fsync_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("cannot open ", path, " to fsync: ", errno_text(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) fail("fsync ", path, ": ", errno_text(err));
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) fail("cannot open directory ", dir, " to fsync: ", errno_text(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some filesystems refuse fsync on directories (EINVAL); their renames are then as durable
  // as they get.
  if (rc != 0 && err != EINVAL) fail("fsync directory ", dir, ": ", errno_text(err));
}

void rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    fail("cannot rename ", from, " to ", to, ": ", errno_text(errno));
}

void write_all(int fd, const void* data, size_t bytes, const std::string& path, int64_t* written,
               const FaultInjection* faults) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    size_t n = bytes;
    if (faults && faults->fail_write_after_bytes >= 0 &&
        *written + int64_t(n) > faults->fail_write_after_bytes)
      fail("cannot write ", path, " at byte ", *written, ": ", errno_text(faults->fail_errno),
           " (injected)");
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("cannot write ", path, " at byte ", *written, ": ", errno_text(errno));
    }
    p += w;
    bytes -= size_t(w);
    *written += w;
  }
}

// One checked writer for every file strata writes (core/files.h).
void atomic_write_file(const std::string& path, const std::string& data) {
  strata::atomic_write_file(path, data);
}

void remove_dir_safely(const std::string& dir) {
  static std::atomic<int> counter{0};
  fs::path p(dir);
  const std::string trash = (p.parent_path() / (".trash-" + p.filename().string() + "-" +
                                                std::to_string(::getpid()) + "-" +
                                                std::to_string(counter++)))
                                .string();
  rename_path(dir, trash);
  std::error_code ec;
  fs::remove_all(trash, ec);
  if (ec) fail("cannot remove ", trash, ": ", ec.message());
}

int64_t dir_bytes(const std::string& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec)) total += int64_t(e.file_size(ec));
  return total;
}

}  // namespace strata::ckpt
