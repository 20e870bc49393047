// Internals of model::GPT: what the one-process entry points keep between calls, over the
// part (model/part.h) and the one chunk and slot of the model part it is (model/stage.h).
// Shared by gpt.cc (training passes, logits) and gpt_heads.cc (custom heads).
#pragma once
#include <vector>

#include "core/memory.h"
#include "model/gpt.h"
#include "model/part.h"

namespace strata::model {

struct GPT::Impl {
  Impl(Part& p, Slot& slot, const StageChunk& whole) : p(p), slot(slot), whole(whole) {}
  Part& p;
  Slot& slot;
  const StageChunk& whole;  // blocks [0, L) with the embedding and the head
  Buffer input_buf;
  Buffer logits_full;  // logits() gathered over tp or cp, on demand
  int32_t *tokens = nullptr, *targets = nullptr;
  float* weights = nullptr;
  bool has_weights = false;
  std::vector<int32_t> doc_start;  // (B, T) of the whole sequence; empty: no documents
  // The rows of the forward under way, when its caller named them (GPT::forward's ids): the
  // MoE blocks key their router jitter by them; positions (T) under context parallelism.
  expert::TokenIds token_ids;
  std::vector<int> token_positions;

  int B = 0, T = 0;  // the last micro-batch (T: this rank's rows under cp)
  bool forward_done = false;  // a forward with targets ran and backward may follow
  bool logits_valid = false;
  bool hidden_valid = false;  // hidden() ran and backward_hidden may follow (gpt_heads.cc)

  MicroInput input() const {
    return {tokens, targets, has_weights ? weights : nullptr, B, T,
            doc_start.empty() ? nullptr : doc_start.data()};
  }
};

// Names the rows of the forward under way (B items of im.T local rows; under context
// parallelism their global positions come from the cp layout) for the MoE blocks, until
// the returned guard ends; nothing without an MoE block or without ids.sample.
struct TokenIdsScope {
  GPT::Impl& im;
  TokenIdsScope(GPT::Impl& im, const SampleIds& ids, int B);
  ~TokenIdsScope();
};

void check_inputs(const GPTConfig& cfg, int max_batch, const int32_t* tokens,
                  const int32_t* targets, int B, int T);

}  // namespace strata::model
