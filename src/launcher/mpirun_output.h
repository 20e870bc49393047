// Splits mpirun's output back into each rank's own output.
//
// With --tag-output, OpenMPI's daemons forward a rank's output in chunks (what one read() of
// the rank's pipe returned, up to 4 KiB) and write the tag "[J,R]<stdout>:" at the start of
// every chunk and after every newline in it. A chunk can start mid-line: a line longer than
// a chunk, or a progress line redrawn with '\r' and no newline, gets the tag inserted in its
// middle, and a plain line-by-line reading of mpirun's stream corrupts it (a `--json` record
// no longer parses). MpirunOutput reads the stream the way it was written: every tag, wherever
// it stands, switches the text that follows to its rank, and each rank's text is rebuilt into
// whole lines. Text that no tag claims (from the start of a line up to its newline) is
// mpirun's own (its error reports), handed out as rank -1.
#pragma once
#include <functional>
#include <map>
#include <string>

namespace strata::launcher {

class MpirunOutput {
 public:
  // A whole line of `rank` without its newline (complete), or, with pass_progress, the
  // text so far of a line that holds a '\r' (a progress line redrawn in place), as is.
  using Sink = std::function<void(int rank, const std::string& text, bool complete)>;

  explicit MpirunOutput(bool pass_progress) : pass_progress_(pass_progress) {}

  // Feeds bytes as read from mpirun's stdout or stderr (one object per stream).
  void feed(const char* data, size_t n, const Sink& sink);
  // End of the stream: every unfinished line is handed out as a line.
  void finish(const Sink& sink);

 private:
  void parse(bool at_end, const Sink& sink);
  void take(int rank, const std::string& text, const Sink& sink);

  bool pass_progress_;
  std::string raw_;                     // not yet parsed: may end in a tag cut in two
  int current_ = -1;                    // the rank the text being read belongs to (-1: mpirun)
  std::map<int, std::string> partial_;  // each rank's unfinished line
};

// Whether `s` is the start of a tag ("[1,0]<std" ...) that more bytes could complete.
bool mpirun_tag_prefix(const std::string& s);

}  // namespace strata::launcher
