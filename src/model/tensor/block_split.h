// One transformer block's backward in two passes on one tensor-parallel rank (zero-bubble's
// split backward, model/stage.h): the input pass computes d loss / d x with the tp
// collectives of the input path and keeps the four linear layers' output gradients; the
// weight pass accumulates those layers' weight (and column biases') gradients. Together they
// issue the collectives of tp_block_backward (model/tensor/block.h) and compute the same
// products, so the gradients equal the fused pass's.
//
// Terms as in block.h: N = B·T rows, n = tc.local_rows(N), C width, Cl = C/T.
//
//   input:  fc proj (row): g* all-gather of dres into d3 (N, C), d fc_gelu (N, 4Cl)
//           -> GELU' -> dfch (N, 4Cl) -> fc (column): (N, C) partial -> f* reduce-scatter
//           -> ln2' -> attn proj (row): all-gather into d2 (N, C) -> d atty -> attention'
//           -> dqkv (N, 3Cl) -> qkv (column): partial -> reduce-scatter -> ln1'; the norms'
//           and row biases' replicated gradients all-reduced (block.h's tp_add_replicated)
//   weight: dW of fc proj (d3, gelu), fc (dfch, ln2 all-gathered again), attn proj (d2,
//           atty), qkv (dqkv, ln1 all-gathered again)
//
// The weight pass re-gathers the two norm outputs rather than keeping their (N, C) gathered
// copies per slot: 2·N·C floats per block and slot saved, and the fused backward gathers them
// too, so the pair sends what one fused pass sends (under SP 4 all-gathers + 2
// reduce-scatters of N·C per block; without SP the gathers are no-ops). Every tp rank of a
// stage runs the same action list, so the weight pass's all-gathers stay matched.
#pragma once
#include <cstdint>

#include "model/tensor/block.h"

namespace strata::model {

// The output gradients kept from the input pass to the weight pass of one block and slot.
struct BlockStash {
  float *d3 = nullptr;    // (N, C) fc proj's output gradient (whole rows, gathered over tp)
  float *dfch = nullptr;  // (N, 4Cl) fc's (after GELU's backward)
  float *d2 = nullptr;    // (N, C) attn proj's (gathered)
  float *dqkv = nullptr;  // (N, 3Cl) qkv's
};
inline int64_t block_stash_floats(int64_t N, int64_t C, int64_t Cl) { return N * (2 * C + 7 * Cl); }

// s.dres (n, C): d loss / d res3 on entry, d loss / d x on exit; g += the norms' and the
// row-parallel biases' gradients; st filled. With s.cp the attention's backward runs over the
// cp group (layer: the key its forward used).
void tp_block_backward_input(TensorComm& tc, const TpDims& d, const TpScratch& s, const Block& w,
                             const Block& g, const LayerActs& a, const float* x,
                             const BlockStash& st, int layer);
// g += the four linear layers' weight gradients and the column-parallel biases' (fc, qkv);
// s.full_a, s.full_b (N, C) scratch for the re-gathered norm outputs.
void tp_block_backward_weight(TensorComm& tc, const TpDims& d, const TpScratch& s, const Block& g,
                              const LayerActs& a, const BlockStash& st);

}  // namespace strata::model
