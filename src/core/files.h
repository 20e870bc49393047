// Files a person named (a flag, a checkpoint path, an output): what they are is checked before
// they are opened, so a FIFO never blocks open() forever, a directory never surfaces as a
// stream error ("basic_filebuf::underflow"), and a device is never replaced by a rename. Every
// error is one line naming `what` (the flag or role) and the path.
#pragma once
#include <string>

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

}  // namespace strata
