// What the collectives cost: their α-β time (the planner), and the payload bytes each parallel
// dimension moves per micro-batch or step (the engine counts the bytes it sends, the training
// summary and `strata plan --local` predict them with these formulas, the tests hold the two
// equal).
//
// α-β time. Terms: n ranks; a link moves β bytes/s per direction per rank and every message step pays
// α seconds of latency; B is the buffer size in bytes as the caller sees it (the full vector
// for all-reduce, reduce-scatter and all-gather; one rank's whole send buffer for all-to-all).
// Ring algorithms (Patarasuk & Yuan 2009; Thakur et al. 2005):
//   all-reduce      2(n-1)·α + 2(n-1)/n · B/β   (reduce-scatter then all-gather)
//   reduce-scatter   (n-1)·α +  (n-1)/n · B/β
//   all-gather       (n-1)·α +  (n-1)/n · B/β
//   all-to-all       (n-1)·α +  (n-1)/n · B/β   (pairwise exchange)
//   send/recv              α +          B/β
// The factor in front of B/β is nccl-tests' bus-bandwidth factor: busbw = algbw · factor.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cost/memory.h"
#include "cost/shapes.h"

namespace strata::cost {

struct Link {
  double gbps = 0;      // β in GB/s (1e9 bytes/s), per direction, per rank
  double alpha_us = 0;  // α: latency of one message step in microseconds
};

enum class Collective { allreduce, reduce_scatter, all_gather, all_to_all, send_recv };

inline const char* collective_name(Collective c) {
  switch (c) {
    case Collective::allreduce:
      return "all-reduce";
    case Collective::reduce_scatter:
      return "reduce-scatter";
    case Collective::all_gather:
      return "all-gather";
    case Collective::all_to_all:
      return "all-to-all";
    case Collective::send_recv:
      return "send/recv";
  }
  return "?";
}

// Bytes each rank puts on the wire per byte of B (nccl-tests' bus-bandwidth factor).
inline double bus_factor(Collective c, int n) {
  if (n <= 1) return c == Collective::send_recv ? 1.0 : 0.0;
  switch (c) {
    case Collective::allreduce:
      return 2.0 * (n - 1) / n;
    case Collective::reduce_scatter:
    case Collective::all_gather:
    case Collective::all_to_all:
      return double(n - 1) / n;
    case Collective::send_recv:
      return 1.0;
  }
  return 0.0;
}

// Latency steps of the ring algorithm.
inline double latency_steps(Collective c, int n) {
  if (n <= 1) return c == Collective::send_recv ? 1.0 : 0.0;
  switch (c) {
    case Collective::allreduce:
      return 2.0 * (n - 1);
    case Collective::reduce_scatter:
    case Collective::all_gather:
    case Collective::all_to_all:
      return double(n - 1);
    case Collective::send_recv:
      return 1.0;
  }
  return 0.0;
}

// Seconds for one collective of B bytes over n ranks on `link`; 0 for a group of one.
inline double collective_s(Collective c, double bytes, int n, const Link& link) {
  if (n <= 1 && c != Collective::send_recv) return 0.0;
  if (bytes <= 0) return 0.0;
  return latency_steps(c, n) * link.alpha_us * 1e-6 + bus_factor(c, n) * bytes / (link.gbps * 1e9);
}

inline double allreduce_s(double bytes, int n, const Link& l) {
  return collective_s(Collective::allreduce, bytes, n, l);
}
inline double reduce_scatter_s(double bytes, int n, const Link& l) {
  return collective_s(Collective::reduce_scatter, bytes, n, l);
}
inline double all_gather_s(double bytes, int n, const Link& l) {
  return collective_s(Collective::all_gather, bytes, n, l);
}
inline double all_to_all_s(double bytes, int n, const Link& l) {
  return collective_s(Collective::all_to_all, bytes, n, l);
}
inline double send_recv_s(double bytes, const Link& l) {
  return collective_s(Collective::send_recv, bytes, 2, l);
}

// Tensor parallelism, payload per micro-batch (model/tensor/collectives.h counts an all-gather
// or reduce-scatter as the whole (N, C) tensor, an all-reduce as its buffer). Terms: L layers,
// C width, N = micro-batch · seq rows, seq the training sequence.
//   with SP:    (5 + 10L)·N·C + 3N + 2C + 6L·C + seq·C floats (Llama: + C + 2L·C)
//               forward 4 per layer + embedding + logits input, backward 6 per layer + 3,
//               the CE statistics (3N) and the replicated gradients under SP
//   without SP: (2 + 4L)·N·C + 3N floats (all-reduces: 2 per layer each way, embedding,
//               logits input gradient, CE statistics)
//   an MoE block (K experts per token) adds N·K (the gates' gradients, all-reduced), and with
//   SP moves one N·C gather less: its backward keeps its input instead of re-gathering it;
//   key/value heads replicated over tp (NKV < T) add 2L·N·hs (each block's k and v input
//   gradients, all-reduced over the T/NKV ranks sharing a head).
// Bytes (fp32) of one micro-batch's tensor-parallel collectives, forward and backward.
inline int64_t tp_comm_bytes_per_micro(const GptShape& m, int tp, bool sp, int64_t micro_batch,
                                       int64_t seq) {
  if (tp <= 1 || micro_batch == 0) return 0;
  const int64_t N = micro_batch * seq, C = m.dim, L = m.layers;
  // The replicated gradients all-reduced under SP: each block's norms and row-parallel biases
  // (GPT-2's 6 views, a Llama block's 2 norm weights), the final norm and the position rows.
  const int64_t replicated = L * (2 * norm_params(m) + (block_parts(m).biases ? 2 * C : 0)) +
                             norm_params(m) + (block_parts(m).learned_pos ? seq * C : 0);
  const int64_t floats = sp ? (5 + 10 * L) * N * C + 3 * N + replicated
                            : (2 + 4 * L) * N * C + 3 * N;
  const int64_t moe = m.moe_layers * (N * m.top_k - (sp ? N * C : 0));
  // Full recomputation runs a recomputed layer's forward again before its backward, its
  // collectives with it: 2 all-gathers + 2 reduce-scatters (SP) or 2 all-reduces of N·C.
  const int64_t again = (m.recompute == Recompute::full ? m.recomputed_layers : 0) * (sp ? 4 : 2) * N * C;
  // Key/value heads replicated over tp (fewer than T): each block's backward sums the k and v
  // gradients (N, 2hs) over the ranks that share the head.
  const int64_t kv = m.llama && tp_kv_share(m.kv_heads, tp) > 1 ? L * N * 2 * (C / m.heads) : 0;
  return 4 * (floats + moe + again + kv);
}

// Context parallelism, per rank, layer and micro-batch (model/context/context_comm.h).
// Terms: C cp ranks, B·Tl local rows, Cl attention columns on this rank (C_model / tp), fp32
// payload.
//   ring     forward  (C-1) kv blocks of 2·B·Tl·Cl                 = (C-1)·8·B·Tl·Cl bytes
//            backward (C-1) kv blocks and (C-1) dkv blocks        = 2x the forward
//   ulysses  forward  all-to-alls of q, k, v and of the output: (C-1)/C of 4·B·Tl·Cl floats
//            backward the same (dO, then dq, dk, dv)
// Ring sends (2C-2)/(4(C-1)/C) = C/2 times Ulysses' bytes; it hides them behind the block
// computations, Ulysses' all-to-alls are exposed.
// ring: the kv blocks travel a ring (CpMode::ring), else Ulysses' all-to-alls.
// Grouped-query attention (Kl key/value columns per rank, 0: Cl): the ring's kv blocks are
// 2·B·Tl·Kl, Ulysses moves q, k, v and the output as (2Cl + 2Kl) columns, or, when the cp
// ranks outnumber the key/value heads (hs the head size), each rank's one shared head:
// 2Cl/C + 2hs columns a block (ulysses_kv_columns).
inline int64_t cp_attention_bytes(bool ring, int C, int64_t B, int64_t Tl, int64_t Cl,
                                  bool backward, int64_t Kl = 0, int64_t hs = 0) {
  if (C <= 1) return 0;
  const int64_t K = Kl > 0 ? Kl : Cl;
  if (ring) return (C - 1) * 2 * B * Tl * K * 4 * (backward ? 2 : 1);
  return (C - 1) * B * Tl * (2 * (Cl / C) + 2 * ulysses_kv_columns(K, C, hs)) * 4;
}

// Forward plus backward of every layer, per micro-batch, plus the forward again of each layer
// full recomputation recomputes (`recomputed`: the ring sends K/V again, Ulysses repeats its
// forward all-to-alls).
inline int64_t cp_bytes_per_micro(bool ring, int C, int layers, int64_t B, int64_t T,
                                  int64_t Cl, int64_t recomputed = 0, int64_t Kl = 0,
                                  int64_t hs = 0) {
  const int64_t Tl = T / C;
  return layers * (cp_attention_bytes(ring, C, B, Tl, Cl, false, Kl, hs) +
                   cp_attention_bytes(ring, C, B, Tl, Cl, true, Kl, hs)) +
         recomputed * cp_attention_bytes(ring, C, B, Tl, Cl, false, Kl, hs);
}

// Expert parallelism (model/expert/), per MoE block and micro-batch: every rank of an ep group
// of P ranks sends E/P assignment counts and one row count (int64) to each rank, then one row
// per (token, owner rank) holding kept assignments (C floats) with K entries of (expert, slot)
// (int64) and K gates (fp32); owners send back one row per received row (the gate-weighted
// sum of its experts' outputs); backward sends the output gradient's rows again and receives
// the rows' input gradients and the K gates' gradients (fp32). Each row travels 4 times.
// Summed over the P ranks of the group (sends to oneself included, as all_to_all_v moves them):
//   bytes = blocks · (P · E · 8 + P · P · 8 + rows · (4 · C · 4 + K · 16))
// rows depends on the routing: at most P · b · T · min(K, P, R) when dropless (R below), equal
// to it when every token's kept assignments lie on as many distinct ranks as they can (always
// at K = 1); fewer with a capacity factor or when a token's experts share a rank. Nothing is
// exchanged when P = 1.
//
// Node-limited routing (--route-groups G --route-max-groups M, 0 < M < G): a token's K experts
// lie in its M groups, so its rows go to the ranks those groups' experts lie on. Group j holds
// experts [j·g, (j+1)·g), g = E/G, and rank q owns [q·r, (q+1)·r), r = E/P, so group j lies on
// the ranks [a_j, b_j] = [floor(j·g / r), floor(((j+1)·g - 1) / r)]. Two groups hold disjoint,
// ordered experts, so their rank ranges share at most one rank (the one holding the last expert
// of the earlier group and the first of the later), and chosen groups j1 < j2 < ... cover
//   Σ (b_ji - a_ji + 1) - #{i : a_j(i+1) = b_ji}
// ranks; R is the most M groups cover (ep_group_limit_ranks). When G divides P (groups of whole
// ranks) every group spans P/G ranks and no two share one: R = M · P / G. When P divides G
// (groups within one rank, E/G | E/P) a group is on one rank: R = min(P, M). Otherwise a group
// can straddle a rank boundary (E 12, G 6, P 4: group 1, experts 2-3, is on ranks 0 and 1) and R
// follows the sum above; ceil(P/G) ranks per group is not a bound then. Without the limit R = P.
// Off the token's host: with H hosts of P/H contiguous ranks and groups = hosts (G = H), a
// token's M groups are M hosts' ranks, at most min(M, H - 1) of them another host's, so at most
// min(K, M · P/H, (H - 1) · P/H) of its rows leave its host (the planner has no hosts count for
// a --local run and its search times one link per group, so nothing uses this yet).
// The bytes of `passes` micro-batch passes over every MoE block whose rows, summed over the
// group's ranks, blocks and passes, were `rows` (exact, for a run that counts its rows).
inline int64_t ep_group_bytes(const GptShape& m, int P, int64_t passes, int64_t rows) {
  if (P <= 1 || m.moe_layers == 0) return 0;
  return passes * m.moe_layers * (int64_t(P) * m.experts * 8 + int64_t(P) * P * 8) +
         rows * (16 * m.dim + 16 * m.top_k);
}
// R: the most of P ranks that M of G groups of the E experts lie on (P when M = 0 or M >= G:
// no limit). When neither of G, P divides the other, in O(G · M): best[j] is the most ranks c
// chosen groups cover when group j is the last of them; the one chosen before it either shares
// no rank with j (a prefix of the groups, since b_i grows with i) or its last rank (one fewer).
inline int64_t ep_group_limit_ranks(int64_t E, int64_t P, int64_t G, int64_t M) {
  if (M <= 0 || M >= G || P <= 1) return P;
  if (P % G == 0) return M * (P / G);     // groups of whole ranks
  if (G % P == 0) return std::min(P, M);  // groups within one rank
  const int64_t g = E / G, r = E / P, none = -(int64_t(1) << 40);
  const size_t n = static_cast<size_t>(G);
  std::vector<int64_t> a(n), b(n), best(n), prev;  // group j on ranks [a[j], b[j]]
  for (size_t j = 0; j < n; ++j) {
    a[j] = int64_t(j) * g / r, b[j] = (int64_t(j + 1) * g - 1) / r;
    best[j] = b[j] - a[j] + 1;
  }
  for (int64_t c = 2; c <= M; ++c) {
    prev.swap(best);
    best.assign(n, none);
    int64_t any = none, apart = none;  // the best of c - 1 groups before j; of those apart from j
    for (size_t j = 0, i = 0; j < n; ++j) {
      for (; i < j && b[i] < a[j]; ++i) apart = std::max(apart, prev[i]);
      const int64_t before = std::max(any - 1, apart);
      if (before > 0) best[j] = before + b[j] - a[j] + 1;
      any = std::max(any, prev[j]);
    }
  }
  return std::min(P, *std::max_element(best.begin(), best.end()));
}
// The most rows one token sends in one MoE block: one per owner rank of its kept assignments,
// min(K, P, R).
inline int64_t ep_group_rows_per_token(const GptShape& m, int P) {
  const int64_t R = ep_group_limit_ranks(m.experts, P, m.route_groups, m.route_max_groups);
  return std::min<int64_t>({m.top_k, P, R});
}
// The rows of one micro-batch pass over every MoE block at most (dropless, every token's kept
// assignments on as many ranks as they can be), and its bytes then.
inline int64_t ep_group_rows_per_micro(const GptShape& m, int P, int64_t tokens_per_rank) {
  return P <= 1 ? 0 : m.moe_layers * int64_t(P) * tokens_per_rank * ep_group_rows_per_token(m, P);
}
inline int64_t ep_group_bytes_per_micro(const GptShape& m, int P, int64_t tokens_per_rank) {
  return ep_group_bytes(m, P, 1, ep_group_rows_per_micro(m, P, tokens_per_rank));
}

// Payload bytes of one rank's gradient reductions in a step of `accum` micro-batches over a
// region of Ψ elements reduced over n ranks: one all-reduce or reduce-scatter of every bucket
// per step at stages 0-1, one per micro-batch at stages 2-3 (parallel/grad_reducer.h), in the
// reduce dtype; nothing over one rank.
inline int64_t grad_reduce_bytes_per_step(int64_t psi, int64_t n, int stage, int64_t accum,
                                          Precision reduce) {
  if (n <= 1) return 0;
  return psi * (reduce == Precision::bf16 ? 2 : 4) * (stage >= 2 ? accum : 1);
}

}  // namespace strata::cost
