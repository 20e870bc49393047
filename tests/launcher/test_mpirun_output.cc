// MpirunOutput: mpirun's --tag-output stream split back into each rank's lines, the tags
// OpenMPI's daemons insert mid-line (at every forwarded chunk) removed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "launcher/mpirun_output.h"

namespace strata::launcher {
namespace {

struct Got {
  std::vector<std::string> lines;  // "R:text" (complete) or "R~text" (progress)
};

// Feeds `stream` in pieces of `piece` bytes (tags cut anywhere), then ends it.
Got split(const std::string& stream, size_t piece, bool pass_progress = false) {
  Got g;
  MpirunOutput out(pass_progress);
  auto sink = [&](int r, const std::string& text, bool complete) {
    g.lines.push_back(std::to_string(r) + (complete ? ":" : "~") + text);
  };
  for (size_t i = 0; i < stream.size(); i += piece)
    out.feed(stream.data() + i, std::min(piece, stream.size() - i), sink);
  out.finish(sink);
  return g;
}

TEST(MpirunOutput, LongLineSplitIntoChunksComesBackWhole) {
  // A 6000-byte JSON record of rank 0 forwarded as two chunks, rank 1's line between them,
  // then mpirun's own message.
  const std::string record = "{\"step\":1,\"note\":\"" + std::string(5970, 'x') + "\"}";
  const std::string stream = "[1,0]<stdout>:" + record.substr(0, 4096) + "[1,1]<stdout>:hello\n" +
                             "[1,0]<stdout>:" + record.substr(4096) + "\n[1,0]<stdout>:{\"step\":2}\n" +
                             "mpirun noticed that process rank 1 exited\n";
  const std::vector<std::string> want = {"1:hello", "0:" + record, "0:{\"step\":2}",
                                         "-1:mpirun noticed that process rank 1 exited"};
  for (size_t piece : {size_t(1), size_t(3), size_t(7), size_t(4096), stream.size()})
    EXPECT_EQ(split(stream, piece).lines, want) << "pieces of " << piece;
}

TEST(MpirunOutput, ProgressLinesLoseTheirTags) {
  const std::string stream = "[1,0]<stderr>:\rstep 1 loss 5.0[1,0]<stderr>:\rstep 2 loss 4.0[1,0]<stderr>:\n";
  EXPECT_EQ(split(stream, 1000).lines, (std::vector<std::string>{"0:\rstep 1 loss 5.0\rstep 2 loss 4.0"}));
  // Passed as they come when asked: no tag in them.
  Got g = split(stream, 1000, true);
  ASSERT_EQ(g.lines.size(), 3u);
  EXPECT_EQ(g.lines[0], "0~\rstep 1 loss 5.0");
  EXPECT_EQ(g.lines[1], "0~\rstep 2 loss 4.0");
  EXPECT_EQ(g.lines[2], "0:");
}

TEST(MpirunOutput, TextThatOnlyLooksLikeATagStays) {
  const std::string stream = "[1,2]<stdout>:array [1,2] and [3,4]<std\nplain [x\n[1,2]<stdout>:cut at [1,";
  EXPECT_EQ(split(stream, 2).lines,
            (std::vector<std::string>{"2:array [1,2] and [3,4]<std", "-1:plain [x", "2:cut at [1,"}));
  EXPECT_TRUE(mpirun_tag_prefix("[1,0]<std"));
  EXPECT_TRUE(mpirun_tag_prefix("["));
  EXPECT_FALSE(mpirun_tag_prefix("[1,0]<stdx"));
  EXPECT_FALSE(mpirun_tag_prefix("[a"));
}

}  // namespace
}  // namespace strata::launcher
