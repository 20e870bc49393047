// The pieces a model part is made of: chunks of consecutive blocks, and the micro-batches
// they run on.
#pragma once
#include <cstdint>

namespace strata::model {

// A chunk is a contiguous range of blocks [begin, end) (a virtual stage under pipeline
// parallelism, parallel/pipeline/schedule.h); the embed chunk also runs the embedding (unit 0:
// wte, wpe), the head chunk also the final LayerNorm (unit L+1) and the tied logits and
// cross-entropy (unit 0's wte). The one-process model is the single chunk [0, L) with both.
struct StageChunk {
  int begin = 0, end = 0;  // blocks [begin, end), at least one
  bool embed = false;      // runs the embedding first (begin == 0)
  bool head = false;       // runs the final norm, logits and loss last (end == layers)
};

// One micro-batch's data, valid for the step: tokens, targets (B, T) int32 (targets null:
// no loss, logits only); weights (B, T) per-token loss weight or nullptr (all ones);
// doc_start (B, T) the position where each position's document begins, for documents packed
// into one sequence (--doc-mask: attention stays inside a document and the position embedding
// restarts at its first token), or nullptr (one document per sequence). Under context
// parallelism tokens, targets and weights are the rank's local rows and doc_start stays the
// whole sequence's, (B, T·cp).
struct MicroInput {
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;
  const float* weights = nullptr;
  int B = 0, T = 0;
  const int32_t* doc_start = nullptr;
};

}  // namespace strata::model
