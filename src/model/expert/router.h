// The router of one MoE block over one group of N tokens: top-k softmax gating with a
// capacity per expert, the load-balancing loss and the z-loss.
//
// Terms. x (N, C) router input, W (E, C) router weight, z = x W^T (N, E) logits,
// p = softmax(z) (N, E). Each token t chooses its K most probable experts
// (choice[t][k], by decreasing p; ties to the lower expert id) with gates
// g[t][k] = p[t][choice] / sum over its K choices (renormalised over the chosen k).
// Drop order: assignments (t, k) are served k-major, then in token order (every token's
// first choice before any second choice, GShard), each expert taking them until it holds
// `capacity` of them; the rest are dropped (their term is missing from the block output:
// the token passes through the residual). slot[t][k] is the assignment's position in its
// expert's batch, -1 when dropped.
// Losses of the group, as sums over its tokens (the model's loss is a sum over tokens that
// the trainer divides by the global token count):
//   aux  = a · N · E · sum_e f_e P_e   f_e = assignments chosen for e / (N K) (before
//          drops), P_e = mean over tokens of p[t][e]  (Switch Transformer; 1 at balance)
//   zsum = z · sum_t (logsumexp_e z[t][e])^2       (ST-MoE router z-loss)
// Cost: 2·N·C·E flops for the logits, O(N·E·K) for the rest.
#pragma once
#include <cstdint>
#include <vector>

#include "model/expert/config.h"

namespace strata::model::expert {

struct Routing {
  int64_t N = 0;
  int E = 0, K = 0;
  std::vector<float> probs;      // (N, E)
  std::vector<float> lse;        // (N) logsumexp of the logits
  std::vector<int32_t> choice;   // (N, K)
  std::vector<float> gate;       // (N, K)
  std::vector<int64_t> slot;     // (N, K), -1: dropped
  std::vector<int64_t> wanted;   // (E) assignments chosen before capacity
  std::vector<int64_t> kept;     // (E) assignments served (<= capacity)
  int64_t dropped = 0;
  double aux = 0, zsum = 0;      // the two loss sums above (coefficients included)
  double entropy_sum = 0;        // sum over tokens of the entropy of p[t] (nats)
};

// Fills r from logits (N, E) (overwritten with nothing: read only).
void route(Routing& r, const float* logits, int64_t N, const MoEConfig& cfg);

// dlogits (N, E) written: the gradient of scale · (sum_t sum_k dgate-weighted gates + aux +
// zsum) given dgate (N, K) = d loss / d g (already including the caller's scale).
void route_backward(const Routing& r, const float* dgate, float scale, const MoEConfig& cfg,
                    float* dlogits);

}  // namespace strata::model::expert
