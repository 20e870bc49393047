// Activation bytes of one pipeline stage of strata's GPT: what model/stage.h's carve
// (carve_slot per slot of each chunk, then Part::carve_scratch once) allocates on one rank, as
// a formula built from activation_buffers' pieces (cost/activations.h), so the one-process
// model and a stage are counted by the same arithmetic.
//
// Terms: a stage holds V chunks (virtual stages); chunk c has `blocks` blocks, of which
// `recomputed` keep only their output (full recomputation), and `slots` activation slots
// (micro-batches in flight: the schedule's chunk_slots, parallel/pipeline/schedule.h).
// N = b·max_seq rows of a micro-batch, n of them in the residual region (N/T under sequence
// parallelism), C width, Cl = C/T. Per slot of chunk c, in bytes:
//   input        n·C·4       the chunk's input (the embedding's output on the embed chunk)
//   layers_kept  activation_buffers' layers_kept of the chunk's blocks
//   messages     n·C·4 each: the output gradient received (all but the head chunk) and the
//                input gradient sent (all but the embed chunk)
//   stash        split backward (zero-bubble) only, per block: the four linear layers'
//                output gradients, (2·N·C + N·fc + N·qkv)·4 (GPT-2: (2·N·C + 7·N·Cl)·4)
//   head         the head chunk's final norm, logits and losses (activation_buffers' head)
// and once per stage: recomputation's working layer and the backward (and tp) scratch, as
// activation_buffers gives them for the stage's blocks. Under context parallelism (C > 1) the
// rows are ceil(max_seq/C) per sequence, qkv and the attention output stay fp32, and the
// ContextComm's buffers are added (cp_buffer_bytes; Ulysses keeps one head-sharded output per
// block and slot). As activation_buffers, the 64-byte alignment padding of each piece is not
// counted. The one-process model is the stage of one chunk (embed and head, one slot) plus
// its copy of the inputs.
#pragma once
#include <cstdint>
#include <vector>

#include "cost/activations.h"

namespace strata::cost {

struct ChunkSlots {
  int64_t blocks = 0;
  int64_t recomputed = 0;  // blocks keeping only their output (full recomputation)
  bool embed = false, head = false;
  int64_t slots = 1;
};

struct StageActivationBuffers {
  int64_t input = 0, layers_kept = 0, messages = 0, stash = 0, head = 0;  // every slot's
  int64_t recompute = 0, scratch = 0;                                     // once
  int64_t cp = 0;  // the ContextComm's buffers
  int64_t total() const {
    return input + layers_kept + messages + stash + head + recompute + scratch + cp;
  }
};

// One rank of a stage: tp rank `rank` of `tp` (sp: sequence parallelism), micro-batches of up
// to `micro_batch` sequences; bf16 compute; context parallelism over cp ranks (ring or
// Ulysses) training sequences of `seq` tokens.
inline StageActivationBuffers stage_activation_buffers(
    const GptShape& m, const std::vector<ChunkSlots>& chunks, bool split_backward, int tp, bool sp,
    int rank, int64_t micro_batch, bool bf16, int cp = 1, bool ring = true, int64_t seq = 0) {
  GptShape local = m;  // a cp rank's rows: ceil(max_seq / cp) per sequence
  local.max_seq = (m.max_seq + cp - 1) / cp;
  const bool attn_fp32 = cp > 1;
  const int64_t N = micro_batch * local.max_seq, Cl = m.dim / tp;
  StageActivationBuffers s;
  GptShape stage = local;  // every block of the stage, for what it holds once
  stage.layers = stage.recomputed_layers = 0;
  int64_t block_slots = 0;
  for (const ChunkSlots& c : chunks) {
    GptShape one = local;
    one.layers = c.blocks;
    one.recomputed_layers = c.recomputed;
    const ActivationBuffers a = activation_buffers(one, tp, sp, rank, micro_batch, bf16, attn_fp32);
    s.input += c.slots * a.embedding;
    s.layers_kept += c.slots * a.layers_kept;
    s.messages += c.slots * (int64_t(!c.head) + int64_t(!c.embed)) * a.embedding;
    const BlockColumns w = block_columns(m, tp);
    if (split_backward) s.stash += c.slots * c.blocks * 4 * (2 * N * m.dim + N * w.fc + N * w.qkv);
    if (c.head) s.head += c.slots * a.head;
    stage.layers += c.blocks;
    stage.recomputed_layers += c.recomputed;
    block_slots += c.blocks * c.slots;
  }
  const ActivationBuffers once =
      activation_buffers(stage, tp, sp, rank, micro_batch, bf16, attn_fp32);
  s.recompute = once.recompute;
  // The tensor-parallel position-gradient scratch spans the whole table under cp too (a Llama
  // has no table).
  s.scratch = once.scratch + (tp > 1 && !m.llama ? 4 * (m.max_seq - local.max_seq) * m.dim : 0);
  if (cp > 1)
    s.cp = cp_buffer_bytes(ring, cp, int(block_slots), micro_batch, seq / cp, Cl, m.heads / tp,
                           kv_columns(m, tp));
  return s;
}

}  // namespace strata::cost
