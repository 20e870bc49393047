#include "core/staged_dir.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/process.h"

namespace fs = std::filesystem;

namespace strata {

namespace {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || !*buf) return "host";
  std::string h = buf;
  for (char& c : h)
    if (c == '/' || c == '-') c = '_';  // '-' separates the pid
  return h;
}

// Removes the staging directories of `out` that processes of this host left behind.
void remove_abandoned(const fs::path& parent, const std::string& prefix) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string f = e.path().filename().string();
    if (f.size() <= prefix.size() || f.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string pid = f.substr(prefix.size());
    if (pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
    if (!process_exists(std::stol(pid))) fs::remove_all(e.path(), ec);
  }
}

}  // namespace

std::string make_staging_dir(const std::string& out, const std::string& tag, const std::string& what) {
  STRATA_CHECK(!out.empty(), what, ": empty path; name the output directory");
  std::string o = out;
  while (o.size() > 1 && o.back() == '/') o.pop_back();
  const fs::path p(o);
  const fs::path parent = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  const std::string prefix = cat(p.filename().string(), ".", tag, "-", host_name(), "-");
  remove_abandoned(parent, prefix);
  const std::string staged = (parent / (prefix + std::to_string(::getpid()))).string();
  std::error_code ec;
  fs::remove_all(staged, ec);  // this pid's, from an earlier process of the same number
  fs::create_directories(staged, ec);
  STRATA_CHECK(!ec, what, " ", out, ": cannot create ", staged, ": ", ec.message());
  return staged;
}

void commit_staging_dir(const std::string& staged, const std::string& out, bool replace,
                        const std::string& what) {
  std::error_code ec;
  auto fail_with = [&](const std::string& why) {
    fs::remove_all(staged, ec);
    fail(what, " ", out, ": ", why);
  };
  if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, out.c_str(), RENAME_NOREPLACE) == 0) return;
  const int err = errno;
  if (err != EEXIST)
    fail_with(cat("cannot rename ", staged, " to it: ", std::strerror(err)));
  if (!replace) fail_with("was created by another process meanwhile; not replacing it");
  if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, out.c_str(), RENAME_EXCHANGE) != 0)
    fail_with(cat("cannot exchange ", staged, " with it: ", std::strerror(errno)));
  fs::remove_all(staged, ec);  // now the replaced output
}

}  // namespace strata
