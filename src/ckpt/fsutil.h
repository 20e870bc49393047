// Durable file operations and the checkpoint directory layout.
//
//   <run>/ckpt/step-000120/          a committed checkpoint (complete by construction: it gets
//                                    this name only after every shard and the manifest are
//                                    on disk)
//   <run>/ckpt/.tmp-step-000130/     a save in progress (or abandoned by a crash)
//   <run>/ckpt/.trash-step-000040-…  a checkpoint being deleted (renamed first, so a crash
//                                    mid-delete never leaves a half directory named step-*)
//   <run>/ckpt/latest                "step-000120\n", replaced atomically
//
// Durability follows the usual POSIX recipe: write a temporary name, fsync the file, rename,
// fsync the directory (a rename is only durable once its directory is).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace strata::ckpt {

// Test and demo hooks. Production code leaves them empty.
struct FaultInjection {
  // Called at each named point of a save (see checkpointer.h); a test may _exit() or raise
  // SIGKILL here to simulate a crash at that instant.
  std::function<void(const char* point)> at_point;
  // The shard write that would take the file past this many bytes fails with fail_errno
  // (ENOSPC by default), as a full disk would. Negative: never.
  int64_t fail_write_after_bytes = -1;
  int fail_errno = 28;  // ENOSPC

  void point(const char* name) const {
    if (at_point) at_point(name);
  }
};

std::string ckpt_root(const std::string& run_dir);  // <run>/ckpt
std::string step_dir_name(int64_t step);             // step-000120
// Step of a committed directory name ("step-000120" -> 120), or nullopt for anything else.
std::optional<int64_t> parse_step_dir(const std::string& name);
// Steps of the committed directories in `root`, ascending.
std::vector<int64_t> list_steps(const std::string& root);
// The directory name `latest` points to, or nullopt when the file is absent; throws for an
// unreadable or malformed pointer.
std::optional<std::string> read_latest(const std::string& root);
// Points a malformed or dangling `latest` of `root` at `name` (a committed step directory).
// Returns what was wrong with it, or "" when it was sound or absent (then nothing is written).
std::string repair_latest(const std::string& root, const std::string& name);

// "<path>: Too many levels of symbolic links" when stat(2) fails on `path` for a reason other
// than its absence (a symbolic link loop, a directory that cannot be searched), else "".
std::string unresolvable(const std::string& path);

// Creates `dir` and its parents; throws naming the path and errno text (read-only disk, a file
// where a directory should be, ...).
void make_dirs(const std::string& dir);
// strata::atomic_write_file (core/files.h), the checked writer: tmp, fsync, rename, fsync dir.
void atomic_write_file(const std::string& path, const std::string& data);
void fsync_file(const std::string& path);
void fsync_dir(const std::string& dir);
// rename(2) with an error naming both paths.
void rename_path(const std::string& from, const std::string& to);
// Renames `dir` to a .trash- name in its parent, then removes it recursively.
void remove_dir_safely(const std::string& dir);
// Total bytes of the regular files in `dir` (not recursive).
int64_t dir_bytes(const std::string& dir);
std::string errno_text(int err);

// write(2) loop that retries short writes; counts bytes into *written and applies the
// injected failure. Throws naming `path`.
void write_all(int fd, const void* data, size_t bytes, const std::string& path, int64_t* written,
               const FaultInjection* faults);

}  // namespace strata::ckpt
