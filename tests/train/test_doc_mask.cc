// --doc-mask end to end: documents packed into sequences of a prepared directory (its own
// tokenizer trained on a generated corpus, one document per line), attention kept inside each
// document and positions restarting per document, in every layout against one process; one
// document per sequence changes nothing; data without a document token is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "cli_util.h"

namespace strata::test::test_doc_mask {
namespace {

using nlohmann::json;

// Lines of 2..25 words from a 13-word vocabulary (an LCG from `seed`): documents of about
// 3..40 tokens, so a 64-token sequence holds several and some cross sequences.
void write_documents(const std::string& path, int lines, uint32_t seed) {
  static const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far",
                                "away", "and", "then", "slept"};
  std::ofstream f(path);
  uint32_t x = seed;
  auto next = [&] { return (x = x * 1103515245u + 12345u) >> 16; };
  for (int i = 0; i < lines; ++i) {
    const int n = 2 + int(next() % 24);
    for (int w = 0; w < n; ++w) f << (w ? " " : "") << words[next() % 13];
    f << "\n";
  }
}

class DocMask : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("docmask");
    write_documents(dir_->file("docs.txt"), 3000, 3);
    auto tok = run_strata("data tokenizer-train " + dir_->file("docs.txt") + " -o " + dir_->file("tok") +
                          " --vocab-size 300");
    ASSERT_EQ(tok.status, 0) << tok.out;
    auto many = run_strata("data prepare " + dir_->file("docs.txt") + " --tokenizer " + dir_->file("tok") +
                           " -o " + dir_->file("many") + " --doc-split line --val-docs 200");
    ASSERT_EQ(many.status, 0) << many.out;
    // One document of random words: every window a single document, started or continued.
    write_documents(dir_->file("long.txt"), 2000, 5);
    auto one = run_strata("data prepare " + dir_->file("long.txt") + " --tokenizer " + dir_->file("tok") +
                          " -o " + dir_->file("one") + " --doc-split file --val-tokens 2000");
    ASSERT_EQ(one.status, 0) << one.out;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string data(const std::string& name) { return " --data " + dir_->file(name); }
  static TempDir* dir_;
};
TempDir* DocMask::dir_ = nullptr;

const std::string kModel =
    "train --layers 4 --dim 32 --heads 4 --max-seq 64 --seq 64 --vocab 320 --batch 4 --steps 8 "
    "--lr 1e-2 --seed 3 --eval-batches 2 --sample-tokens 0";

TEST_F(DocMask, EveryLayoutEqualsOneProcess) {
  const std::string base = kModel + data("many") + " --doc-mask";
  const TrainRun ref = train_run(base, "dm-ref");
  ASSERT_EQ(ref.cli.status, 0) << ref.cli.err;
  ASSERT_EQ(ref.losses.size(), 8u);
  const char* layouts[] = {
      "--nproc 2",
      "--nproc 2 --zero 3",
      "--nproc 2 --tp 2 --sp",
      "--nproc 2 --cp 2",
      "--nproc 2 --cp 2 --cp-chunks contiguous",
      "--nproc 2 --cp 2 --cp-mode ulysses",
      "--nproc 2 --pp 2",
      "--nproc 2 --pp 2 --schedule zb",
      "--nproc 2 --pp 2 --schedule interleaved --virtual-stages 2 --micro-batches 4",
      "--nproc 4 --tp 2 --cp 2 --sp",
      "--nproc 4 --pp 2 --cp 2 --cp-mode ulysses",
  };
  for (const char* layout : layouts) {
    const TrainRun r = train_run(base + " " + layout, "dm-layout");
    ASSERT_EQ(r.cli.status, 0) << layout << "\n" << r.cli.err;
    EXPECT_LT(max_abs_diff(r.losses, ref.losses), 1e-5) << layout;
    // The held-out loss of the last eval, over the same masked documents.
    EXPECT_NEAR(r.summary["eval_loss"].get<double>(), ref.summary["eval_loss"].get<double>(), 1e-5) << layout;
  }
}

// The mask changes what the model sees where documents share a sequence, and nothing where a
// sequence is one document.
TEST_F(DocMask, MasksManyDocumentsAndLeavesOneDocumentAlone) {
  const TrainRun masked = train_run(kModel + data("many") + " --doc-mask", "dm-many");
  const TrainRun plain = train_run(kModel + data("many"), "dm-plain");
  ASSERT_EQ(masked.cli.status, 0) << masked.cli.err;
  ASSERT_EQ(plain.cli.status, 0) << plain.cli.err;
  EXPECT_GT(max_abs_diff(masked.losses, plain.losses), 1e-3);
  EXPECT_GT(std::abs(masked.summary["eval_loss"].get<double>() - plain.summary["eval_loss"].get<double>()), 1e-4)
      << "the held-out batches are masked too";
  EXPECT_EQ(masked.summary["config"]["doc_mask"]["doc_token"], -1);

  const TrainRun one = train_run(kModel + data("one") + " --doc-mask --nproc 2 --cp 2", "dm-one");
  const TrainRun one_plain = train_run(kModel + data("one") + " --nproc 2 --cp 2", "dm-one-plain");
  ASSERT_EQ(one.cli.status, 0) << one.cli.err;
  ASSERT_EQ(one_plain.cli.status, 0) << one_plain.cli.err;
  EXPECT_EQ(one.losses, one_plain.losses);  // bit for bit
}

// A text file's bytes with --doc-token 10: each line is a document.
TEST_F(DocMask, ADocumentTokenForDataWithoutAManifest) {
  write_small_text(dir_->file("small.txt"), 7, 20000);
  const std::string base = "train --layers 2 --dim 32 --heads 4 --max-seq 64 --seq 64 --batch 4 --steps 4 "
                           "--sample-tokens 0 --data " + dir_->file("small.txt");
  const TrainRun lines = train_run(base + " --doc-mask --doc-token 10", "dm-text");
  const TrainRun plain = train_run(base, "dm-text-plain");
  ASSERT_EQ(lines.cli.status, 0) << lines.cli.err;
  ASSERT_EQ(plain.cli.status, 0) << plain.cli.err;
  EXPECT_GT(max_abs_diff(lines.losses, plain.losses), 1e-4);
}

TEST_F(DocMask, DataWithoutADocumentTokenIsRefusedInOneLine) {
  auto synthetic = run_strata("train --layers 1 --dim 32 --steps 1 --doc-mask", "", Streams::separate);
  EXPECT_NE(synthetic.status, 0);
  EXPECT_NE(synthetic.err.find("--doc-mask: synthetic"), std::string::npos) << synthetic.err;
  EXPECT_NE(synthetic.err.find("names no document token"), std::string::npos) << synthetic.err;
  auto alone = run_strata("train --layers 1 --dim 32 --steps 1 --doc-token 3", "", Streams::separate);
  EXPECT_NE(alone.status, 0);
  EXPECT_NE(alone.err.find("--doc-token 3 needs --doc-mask"), std::string::npos) << alone.err;
  auto outside = run_strata("train --layers 1 --dim 32 --steps 1 --doc-mask --doc-token 999", "",
                            Streams::separate);
  EXPECT_NE(outside.status, 0);
  EXPECT_NE(outside.err.find("--doc-token 999 is outside the vocabulary"), std::string::npos) << outside.err;
}

}  // namespace
}  // namespace strata::test::test_doc_mask
