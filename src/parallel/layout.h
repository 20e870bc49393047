// Who holds what of the flat parameter space under ZeRO, and how gradients are bucketed.
//
// Terms. Ψ: elements of the flat parameter buffer. N: data-parallel ranks. S = ceil(Ψ/N):
// shard length. The flat space is padded to N·S; rank r owns the contiguous elements
// [r·S, (r+1)·S) of it, of which the real ones are [r·S, min((r+1)·S, Ψ)) (the last rank, or
// the last few when N does not divide Ψ, holds padding that is never read or communicated).
// Every sharded state is S elements per rank, so model states match the ZeRO arithmetic
// with the ceiling (core/shard.h) for any Ψ and N, including N > Ψ.
//
// A range of the flat space (a unit, a bucket) is split between the ranks whose shards it
// intersects: split_counts() gives each rank's element count in rank order, which is what
// reduce_scatter_v and all_gather_v take, so one collective moves a whole range whatever
// its alignment to shard boundaries.
//
// Buckets: consecutive units taken in reverse unit order (the order their gradients are
// final in backward: L+1, L, ..., 1, 0) until adding the next would exceed the cap; a unit
// above the cap is a bucket alone. Bucket 0 is therefore ready first. Unit 0 (the
// embeddings, tied with the output layer) is always a bucket of its own, the last: its
// gradients start with the output layer, first in backward, and are final only after the
// input embedding, last, so any unit sharing its bucket would wait for the very end of
// backward, and at stages 2-3 its buffer is held through all of backward.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata::parallel {

struct Range {
  int64_t begin = 0, end = 0;  // [begin, end)
  int64_t size() const { return end > begin ? end - begin : 0; }
  bool empty() const { return end <= begin; }
};

Range intersect(Range a, Range b);

class ShardLayout {
 public:
  ShardLayout(int64_t psi, int world, int rank);
  int64_t psi() const { return psi_; }
  int world() const { return world_; }
  int rank() const { return rank_; }
  int64_t shard_elems() const { return shard_; }  // S, the length of every shard buffer
  // Real elements owned by rank r (possibly empty).
  Range shard(int r) const;
  Range own() const { return shard(rank_); }
  // Elements of `r` owned by each rank, in rank order (they sum to r.size()).
  std::vector<size_t> split_counts(Range r) const;
  // This rank's part of `r`, and its offset inside `r`.
  Range own_part(Range r) const { return intersect(r, own()); }
  int64_t own_offset_in(Range r) const;

 private:
  int64_t psi_;
  int world_, rank_;
  int64_t shard_;
};

struct Bucket {
  int first_unit = 0, last_unit = 0;  // units first_unit .. last_unit (first_unit >= last_unit)
  Range range;                        // flat elements of those units
};

// units[u] is unit u's flat range; units are contiguous and in increasing order. No bucket
// holds both unit b - 1 and unit b for b in breaks (the starts of a part's chunks).
std::vector<Bucket> plan_buckets(const std::vector<Range>& units, int64_t cap_elems,
                                 const std::vector<int>& breaks = {});

// Cap in elements for a bucket of `mb` MiB of `elem_bytes`-byte gradients (at least 1).
int64_t bucket_cap_elems(double mb, int elem_bytes);

}  // namespace strata::parallel
