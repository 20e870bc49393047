// Files a person named (a flag, a checkpoint path, an output): what they are is checked before
// they are opened, so a FIFO never blocks open() forever, a directory never surfaces as a
// stream error ("basic_filebuf::underflow"), and a device is never replaced by a rename. Every
// error is one line naming `what` (the flag or role) and the path.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace strata {

// "a regular file", "a directory", "a FIFO", "a character device", "a block device",
// "a socket", "missing" (links are followed).
std::string file_kind(const std::string& path);

// Throws unless `path` is (a link to) a regular file:
//   "<what> PATH: is a directory, not a file" / "is a FIFO, not a regular file" / "does not exist"
void require_regular_file(const std::string& path, const std::string& what);

// An output that will be written through a temporary file and renamed over `path`: throws
// unless `path` is absent or a regular file (a rename would replace a device node, and could
// not replace a directory).
void require_replaceable_file(const std::string& path, const std::string& what);

// open(2) read-only that never blocks (O_NONBLOCK until the file is known to be regular) and
// refuses anything but a regular file. Returns the descriptor (O_CLOEXEC); throws otherwise.
int open_regular_file(const std::string& path, const std::string& what);

// The whole of a regular file, opened as open_regular_file does (a FIFO never blocks the read);
// throws naming `what` and the path.
std::string read_regular_file(const std::string& path, const std::string& what);

// write(2) until all `bytes` are written (retrying short writes and EINTR); throws naming
// `path` on a failed write (ENOSPC, EIO).
void write_fully(int fd, const void* data, size_t bytes, const std::string& path);

// Writes `data` to `path` through <path>.tmp, fsync, rename, fsync of the directory, so a
// reader sees the old file or the new one, never half of one. A target that exists and is not
// a regular file (a device node such as /dev/full, a FIFO, a directory) is refused before
// anything is written; a failed write (ENOSPC, EIO) removes <path>.tmp and throws naming it.
void atomic_write_file(const std::string& path, const std::string& data);
// The same for a file made of several pieces (a header and a large body), written in turn
// without first joining them in memory.
void atomic_write_file(const std::string& path, const std::vector<std::string_view>& parts);

// A log written line by line (metrics.jsonl): each record reaches the file when written, so a
// run that stops keeps what came before, which a write-then-rename could not. The target must
// be absent or a regular file (a FIFO would block, a device would swallow the records), and
// every write is checked: a full disk fails with the path instead of losing records silently.
class LineLog {
 public:
  LineLog() = default;
  // Opens `path` (created 0644), emptied unless `append`. Throws naming `what` and the path.
  LineLog(const std::string& path, bool append, const std::string& what = "log");
  LineLog(LineLog&& o) noexcept;
  LineLog& operator=(LineLog&& o) noexcept;
  LineLog(const LineLog&) = delete;
  LineLog& operator=(const LineLog&) = delete;
  ~LineLog();
  bool is_open() const { return fd_ >= 0; }
  void write_line(std::string_view line);  // appends line + '\n'; throws on a failed write

 private:
  int fd_ = -1;
  std::string path_;
};

// Input text (a line, a token, a field from a file or a flag) as it is echoed into an error:
// single-quoted, printable ASCII kept, other bytes escaped (\t, \n, \r, \xNN), and cut after
// about `max_chars` characters with "..." and the whole length, so a binary file or a 200 MB
// line reads as one short line:  'abc\x00def'   'aaaaaaaa...' (200000000 bytes)
std::string quote_input(std::string_view text, size_t max_chars = 80);

// A whole error line as main prints it: any run of more than `max_word` non-blank characters
// (a 400-digit flag value echoed by the parser) is cut to its start, "..." and its length.
std::string cap_long_words(std::string_view line, size_t max_word = 200);

}  // namespace strata
