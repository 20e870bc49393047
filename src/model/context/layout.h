// How context parallelism cuts one sequence over the C ranks of a cp group, and which
// settings it refuses.
//
// Terms: T tokens of a full sequence, C cp ranks, Tl = T / C tokens per rank ("local rows" of
// each batch item), S tokens per chunk.
//   zigzag      T cut into 2C chunks of S = T / 2C; rank r holds chunks r and 2C-1-r, in that
//               order. Under causal attention chunk i sees i + 1/2 chunks of keys, so rank r
//               works on (r + 1/2) + (2C - 1 - r + 1/2) = 2C chunk pairs: the same on every
//               rank (Brandon et al. 2023, "striped"/zigzag load balancing).
//   contiguous  T cut into C chunks of S = T / C; rank r holds chunk r. Rank C-1 attends to
//               the whole sequence, rank 0 to its own chunk only: the last rank does about
//               (2C - 1) / C times the average work.
// Every per-token tensor of a cp rank (tokens, activations, losses) holds its chunks in this
// order, as (B, Tl, ...) rows: local row t of a batch item is global position position(r, t).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "model/gpt.h"
#include "model/parallel_rules.h"

namespace strata::model {

enum class CpChunks : uint8_t { zigzag, contiguous };

struct CpOptions {
  CpMode mode = CpMode::ring;
  CpChunks chunks = CpChunks::zigzag;
};

CpMode parse_cp_mode(const std::string& s);      // "ring" | "ulysses"; throws naming the value
CpChunks parse_cp_chunks(const std::string& s);  // "zigzag" | "contiguous"
const char* cp_chunks_name(CpChunks c);

struct SeqLayout {
  CpChunks kind = CpChunks::zigzag;
  int C = 1, T = 0;

  int chunks_per_rank() const { return kind == CpChunks::zigzag ? 2 : 1; }
  int chunk_len() const { return T / (C * chunks_per_rank()); }
  int local_len() const { return T / C; }
  // Global chunk index of rank r's c-th chunk.
  int chunk_id(int r, int c) const { return kind == CpChunks::zigzag && c == 1 ? 2 * C - 1 - r : r; }
  // Global position of rank r's local row t.
  int position(int r, int t) const {
    const int S = chunk_len();
    return chunk_id(r, t / S) * S + t % S;
  }
  // Global positions of rank r's local_len() rows, in local order.
  std::vector<int> positions(int r) const {
    std::vector<int> out(static_cast<size_t>(local_len()));
    for (int t = 0; t < local_len(); ++t) out[size_t(t)] = position(r, t);
    return out;
  }
  // local (B, Tl, width) <- rank r's rows of full (B, T, width).
  template <typename X>
  void take(X* local, const X* full, int B, int r, int64_t width) const {
    const int S = chunk_len(), Tl = local_len();
    for (int b = 0; b < B; ++b)
      for (int c = 0; c < chunks_per_rank(); ++c)
        std::memcpy(local + (int64_t(b) * Tl + c * S) * width,
                    full + (int64_t(b) * T + int64_t(chunk_id(r, c)) * S) * width,
                    sizeof(X) * S * width);
  }
  // full (B, T, width) <- rank r's local rows (the other ranks' rows untouched).
  template <typename X>
  void put(X* full, const X* local, int B, int r, int64_t width) const {
    const int S = chunk_len(), Tl = local_len();
    for (int b = 0; b < B; ++b)
      for (int c = 0; c < chunks_per_rank(); ++c)
        std::memcpy(full + (int64_t(b) * T + int64_t(chunk_id(r, c)) * S) * width,
                    local + (int64_t(b) * Tl + c * S) * width, sizeof(X) * S * width);
  }
};

// Refuses, with one line naming the flags and numbers, a context-parallel layout the model
// and sequence cannot take: seq not divisible by 2C (ring, zigzag) or C, heads / tp not
// divisible by C (Ulysses), C larger than the sequence.
void check_context_parallel(const GPTConfig& cfg, int tp, int cp, const CpOptions& o, int seq);

}  // namespace strata::model
