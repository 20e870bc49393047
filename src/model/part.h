// A model part: the trunk written once over chunks (model/chunk.h). The one-process model
// (model/gpt.h) is the part with the single chunk [0, L) holding the embedding and the head
// and one activation slot; a pipeline stage (model/stage.h) is a part with its chunks and as
// many slots per chunk as its schedule keeps micro-batches in flight. Tensor parallelism is
// the part's communicator (its size-1 form does no communication), context parallelism its
// attention group, experts its MoE blocks: the passes below serve every layout.
//
// Units and hooks (model/gpt.h): the part holds some of the global units (unit 0 embeddings,
// 1..L blocks, L+1 final norm, L+2.. expert units) and calls its hooks around each one's use
// in every pass, in the order gpt.h documents; a part without hooks calls nothing.
// Compute runs only for micro-batches with rows; the hooks (and an MoE block's
// expert-parallel exchange) run for empty ones too, so collectives stay matched.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/trace.h"
#include "model/block.h"
#include "model/chunk.h"
#include "model/gpt.h"

namespace strata::model {

// One micro-batch's activations of one chunk. Embed chunk: x is the embedding's output;
// others: the activation received from the previous chunk. gin / gout: d loss / d output
// (received; not on the head chunk) and d loss / d x (to send; not on the embed chunk).
struct Slot {
  float* x = nullptr;  // (n, C)
  std::vector<LayerActs> layers;
  std::vector<BlockStash> stash;  // split backward only
  float *gin = nullptr, *gout = nullptr;
  float *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;
  uint16_t* lnf_h = nullptr;  // bf16 compute: instead of lnf
  float *logits = nullptr, *losses = nullptr, *lse = nullptr;  // head: (N, Vr), (N), (N)
  const float* out() const { return layers.empty() ? x : layers.back().res3; }
};
// Carves one slot of chunk ch (base = nullptr counts). split: the stash of every block.
void carve_slot(Carver& c, Slot& s, const StageChunk& ch, const GPTConfig& cfg, const ActShape& a,
                bool bf16, bool split, bool attn_f32);

// The block's architecture from the config (model/block.h).
BlockArch block_arch(const GPTConfig& cfg);

// What block l of chunk ch keeps under the config's recomputation policy.
BlockKeep block_keep(const GPTConfig& cfg, const StageChunk& ch, int l);

// What the head of a forward produces: the loss (and logits), the logits only, or stops at
// the final norm's output (custom heads, gpt.h's hidden()).
enum class Head { loss, logits, hidden };

// A "compute" trace span for one unit's work, built only when tracing is on.
class UnitSpan {
 public:
  UnitSpan(const char* pass, const char* what, int layer = -1) {
    if (!tracer().enabled()) return;
    std::string name = std::string(pass) + " " + what;
    if (layer >= 0) name += std::to_string(layer);
    span_.emplace(tracer(), std::move(name), "compute");
  }

 private:
  std::optional<TraceSpan> span_;
};

// Refuses document starts (MicroInput::doc_start, (B, T)) that are not a partition of each
// sequence into documents: starting at 0, non-decreasing, never past the position.
void check_doc_starts(const int32_t* doc_start, int B, int T);

inline float* checked(float* p, int unit, const char* what) {
  STRATA_CHECK(p, "unit ", unit, " has no ", what, " memory bound");
  return p;
}

struct Part {
  GPTConfig cfg;
  TensorComm solo;             // the size-1 communicator
  TensorComm* tc = &solo;      // this rank's tensor-parallel group, or solo
  TpShard shard;
  ContextComm* cp = nullptr;   // the context-parallel group of attention; null: none
  bool bf16 = false;           // bf16 compute
  std::vector<float*> unit_params, unit_grads;  // by global unit; null: not held (or unbound)
  std::vector<int64_t> view_rel;  // per view of the global table: offset inside its unit
  std::vector<int> view0;         // first view of global unit u + 1
  UnitHooks hooks;
  std::shared_ptr<expert::MoE> moe;  // MoE blocks; null when dense
  ExpertShard experts;
  const expert::TokenIds* ids = nullptr;  // who the rows of the forward under way are
  TpScratch s;
  float* ce_stats = nullptr;  // (2N) vocab-parallel cross-entropy statistics (T > 1)
  std::vector<int32_t> doc_pos;  // (B, T) the rows' positions in their documents
  std::vector<int32_t> rope_pos;  // (B, T) the rows' rotary positions (no documents)
  LayerActs work{};             // recomputation's scratch (carve_scratch; block_keep)
  float* rounded_in = nullptr;  // (n, C) --recompute-inputs bf16: a block's input, widened
  int64_t recompute_ns = 0;     // wall time spent recomputing, all passes so far

  Part(const Part&) = delete;
  Part& operator=(const Part&) = delete;
  Part() = default;

  // Fills view_rel and view0 from the global table of this rank's shard (every unit, in
  // unit order, at its one-process offsets).
  void set_table(const std::vector<ParamView>& global);
  // Carves the shared scratch (after the slots) for a (see ActShape), with recomputation's
  // working layer for the part's chunks.
  void carve_scratch(Carver& c, const ActShape& a, const std::vector<StageChunk>& chunks, bool attn_f32);
  TpDims dims(int B, int T) const;

  // Forward of chunk ch for micro-batch `in` on slot s (slot: the index of s in its chunk,
  // which keys Ulysses' saved state per layer and slot). Returns the sum of weighted token
  // losses on the head chunk with Head::loss, else 0.
  double forward(const StageChunk& ch, Slot& s, const MicroInput& in, int slot, Head head);
  // Backward of scale · that sum, gradients accumulated (+=). from = loss: from the targets;
  // logits: s.logits holds d loss / d logits; hidden: s_.dbuf_c holds d loss / d lnf. split:
  // zero-bubble's input pass (dense blocks; the linear layers' output gradients go to the
  // slot's stash and backward_weight accumulates their weight gradients later; an MoE block
  // runs its whole backward in this pass).
  void backward(const StageChunk& ch, Slot& s, const MicroInput& in, float scale, int slot,
                bool split, Head from);
  void backward_weight(const StageChunk& ch, Slot& s, const MicroInput& in, int slot);

  void before(int unit, Pass p) {
    if (hooks.before_unit) hooks.before_unit(unit, p);
  }
  void after(int unit, Pass p) {
    if (hooks.after_unit) hooks.after_unit(unit, p);
  }

 private:
  Block views(float* base, int layer) const;
  std::unique_ptr<MoEBlock> moe_block(int layer, bool with_grads, float scale, int slot);
  void moe_block_done(const MoEBlock* b, Pass pass);
  void embed_forward(float* out, const MicroInput& in, const TpDims& d);
  // The activations of a block's backward pass: its kept ones, with what it did not keep
  // recomputed into `work` (timed into recompute_ns).
  LayerActs recomputed(const BlockCtx& c, const Block& w, const LayerActs& kept, const float* x,
                       BlockKeep keep);
  // Documents: each local row's position in its document, (B, d.T) in doc_pos; else nullptr.
  const int32_t* doc_positions(const MicroInput& in, const TpDims& d);
  void embed_backward(const MicroInput& in, const TpDims& d);
  // Llama: the rows' rotary positions (B, d.T): in their document, else in the sequence
  // (global under cp); GPT-2: nullptr.
  const int32_t* rope_positions(const MicroInput& in, const TpDims& d);
  // The output layer's weight (or gradient) among `units`: the tied wte of unit 0, or lm_head
  // in unit L+1.
  float* output_layer(const std::vector<float*>& units, const char* what) const;
  // The activations block i of a slot runs on (effective_acts; an output_bf16 block writes
  // its fp32 output to s.dbuf_c, free outside a block's backward), and its input: the slot's
  // x, the previous block's res3, or its bf16 output widened into rounded_in.
  LayerActs block_acts(const LayerActs& kept, BlockKeep keep) const;
  const float* block_input(const Slot& sl, size_t i, const TpDims& d);
};

}  // namespace strata::model
