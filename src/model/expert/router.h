// The router of one MoE block over one group of N tokens: top-k softmax gating with a
// capacity per expert, the load-balancing loss and the z-loss.
//
// Terms. x (N, C) router input, W (E, C) router weight, z = x W^T (N, E) logits,
// p = softmax(z) (N, E). Each token t chooses its K most probable experts
// (choice[t][k], by decreasing p; ties to the lower expert id) with gates
// g[t][k] = p[t][choice] / sum over its K choices (renormalised over the chosen k). With a
// balancing bias b (E; MoEConfig::bias_rate) the choice is by decreasing p + b, the gates
// still p's: the bias steers which experts a token reaches, never how much of each it takes.
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
//
// Sigmoid scores (MoEConfig::score, DeepSeek-V3): s = sigmoid(z) takes p's place for the
// choice and the gates (so the gates are the chosen s normalised over the k), and the balance
// loss's P_e is the mean of s_e / sum_e' s_e'. The z-loss is on the logits either way.
// Sequence-wise balance (MoEConfig::aux_scope): f_e and P_e are counted per sequence (the
// caller's seq_rows rows each, under cp the sequence's rows on every cp rank), and aux is the
// sum over sequences of a · T · E · sum_e f_e P_e (DeepSeek-V3's loss times the sequence's T
// tokens, so the trainer's division by tokens averages it). Each sequence is complete in one
// forward, so no pipeline schedule can split its sums. Capacity stays per group.
// Node-limited routing (MoEConfig::route_max_groups): before the top-k, a token keeps the M
// groups of E / G experts whose best ceil(K / M) scores (bias included) sum highest.
//
// A group split over ranks (context parallelism: each rank holds chunks of every sequence of
// the micro-batch; RouteGroup): the group is still the whole micro-batch, as in one process.
// The ranks sum wanted, the mean probabilities and N (one all-reduce of 2E + 1), so f_e, P_e
// and the capacity are the group's; each rank's aux is its tokens' share N_local / N of the
// group's, so the ranks' sum is the group's aux and each token's gradient is one process's.
// When capacity can drop, the ranks gather every assignment's (token order, expert) and each
// serves its own in the group's k-major, token order (a prefix count per expert), so the same
// assignments are dropped as in one process. slot numbers stay local (0.. kept on this rank).
#pragma once
#include <cstdint>
#include <vector>

#include "model/expert/config.h"

namespace strata::comm {
class ProcessGroup;
}

namespace strata::model::expert {

// The ranks that hold the other tokens of this group, and where this rank's lie in it.
struct RouteGroup {
  comm::ProcessGroup* ranks = nullptr;  // every rank routes the same N at the same time
  const int64_t* order = nullptr;       // (N) each local token's index in the group's order
};

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
  int64_t group_N = 0;                // tokens of the whole group (N unless split over ranks)
  std::vector<int64_t> group_wanted;  // (E) wanted over the whole group
  int64_t seg_rows = 0;               // local rows of each balance segment (group or sequence)
  std::vector<double> seg_daux;       // (segments, E) d aux / d P-source: a · E · f_e
  double entropy_sum = 0;        // sum over tokens of the entropy of p[t] (nats)
};

// Fills r from logits (N, E) (overwritten with nothing: read only). group: null when the
// N tokens are the whole group.
// bias: the block's balancing bias (E), or null. seq_rows: the local rows of each sequence
// for sequence-wise balance (0: the whole forward is one sequence).
void route(Routing& r, const float* logits, int64_t N, const MoEConfig& cfg,
           const RouteGroup* group = nullptr, const float* bias = nullptr, int64_t seq_rows = 0);

// dlogits (N, E) written: the gradient of scale · (sum_t sum_k dgate-weighted gates + aux +
// zsum) given dgate (N, K) = d loss / d g (already including the caller's scale); logits (N,
// E) the forward's.
void route_backward(const Routing& r, const float* logits, const float* dgate, float scale,
                    const MoEConfig& cfg, float* dlogits);

}  // namespace strata::model::expert
