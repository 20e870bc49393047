// The summary.json builder: sections are top-level keys set once, in any order, and their
// lines print in the order the sections were added.
#include <gtest/gtest.h>

#include "core/error.h"
#include "train/summary.h"

namespace strata::train {
namespace {

TEST(SummaryBuilder, SectionsAreKeysSetOnceWithTheirLinesInOrder) {
  SummaryBuilder s;
  s.set_all({{"steps", 3}, {"final_loss", 2.5}});
  s.set("pipeline", {{"pp", 2}});
  s.line("pipeline: 2 stages");
  s.line("context parallel: cp 2");
  EXPECT_TRUE(s.has("pipeline"));
  EXPECT_FALSE(s.has("tensor_parallel"));
  EXPECT_EQ(s.doc()["steps"], 3);
  EXPECT_EQ(s.doc()["pipeline"]["pp"], 2);
  EXPECT_EQ(s.text(), "\npipeline: 2 stages\ncontext parallel: cp 2");
  EXPECT_THROW(s.set("steps", 4), Error);
  EXPECT_THROW(s.set_all({{"pipeline", {{"pp", 4}}}}), Error);
  EXPECT_EQ(s.doc()["steps"], 3);
}

TEST(SummaryBuilder, NoLinesNoText) {
  SummaryBuilder s;
  EXPECT_EQ(s.text(), "");
  EXPECT_TRUE(s.doc().is_object());
  EXPECT_TRUE(s.doc().empty());
}

}  // namespace
}  // namespace strata::train
