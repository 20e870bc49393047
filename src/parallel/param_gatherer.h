// Stage 3 (FSDP): each rank keeps only its shard of the parameters; a unit's full
// parameters are all-gathered into a slot just before the unit runs and the slot is freed
// after (forward: when reshard_after_forward; backward: always), with the next units'
// gathers issued ahead of use so they run on the communication thread while the current
// unit computes.
//
// Order of use in one micro-batch (model/gpt.h):
//   forward 0, 1, ..., L, L+1, 0 (logits)   backward 0 (logits ... embedding), L+1, L, ..., 1
// Unit 0 (embeddings, tied with the output layer) is used at both ends of the pass, so it has
// its own slot and stays gathered from its first forward use to the end of its backward, as
// FSDP keeps the root module's parameters. The last block L and the final norm L+1 are not
// freed after forward either: they are the first units backward needs (torchtitan keeps the
// last block unsharded after forward for the same reason). The other units share `slots`
// buffers of the largest block's size: prefetch + 1 of them (the unit in use plus `prefetch`
// ahead), or L + 1 when reshard_after_forward is off (every block stays gathered from its
// forward to its backward). Gather bytes: (|unit 0| + slots · max |block|) · working-dtype
// bytes. After each optimizer step the first units of the next forward are gathered at once
// (prime), so the next step does not start by waiting for them.
//
// Prefetch: at each unit's use the gatherer looks ahead in the order above, past unit 0, at
// the next `prefetch` distinct units, and issues the gathers of those not yet resident while
// slots are free. All decisions depend only on the sequence of hook calls, never on timing,
// so every rank issues the same collectives in the same order. A use that does not follow
// the predicted order (eval forwards, sampling) is found from the start of the order; a
// unit that is needed with no free slot evicts a resident unit not in use.
//
// A region without a tied unit 0 (the experts of an MoE model, parallel/region.h) has no
// slot of its own: order forward 0 .. U-1, backward U-1 .. 0, every unit in the shared
// slots, and only the last unit is kept from its forward to its backward.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "comm/work.h"
#include "core/memory.h"
#include "model/gpt.h"

namespace strata::parallel {

struct Region;  // parallel/region.h

class ParamGatherer {
 public:
  explicit ParamGatherer(Region& region);
  // Waits until the unit's full parameters (working dtype) are gathered and returns them;
  // issues prefetches first.
  void* acquire(int unit, model::Pass pass);
  void release(int unit, model::Pass pass);
  // The shards changed (optimizer step, checkpoint load): waits for gathers in flight and
  // forgets every gathered unit.
  void invalidate();
  // Issues the gathers of the first units of the next forward (after invalidate, on every
  // rank), so the step's first use does not wait for them.
  void prime();
  int64_t buffer_bytes() const { return int64_t(buf_.bytes()); }
  int num_slots() const { return int(slots_.size()); }
  int64_t gathers_issued() const { return gathers_; }

 private:
  struct Slot {
    int64_t offset = 0;  // elements into buf_
    int unit = -1;       // unit held (gathered or in flight), -1 when free
  };
  struct UnitState {
    int slot = -1;
    bool in_use = false;
    comm::WorkPtr work;  // the gather, until waited for
  };
  void issue(int unit, int slot);
  int free_slot(int unit);  // -1 when none
  void evict_for(int unit);
  void prefetch_from(size_t pos);
  void drop(int unit);
  bool own_slot(int unit) const;  // unit 0 of a region with tied_unit0: slot 0
  int first_shared_slot() const;

  Region& r_;
  Buffer buf_;
  std::vector<Slot> slots_;  // slot 0: unit 0 when tied
  std::vector<UnitState> units_;
  std::vector<std::pair<int, model::Pass>> order_;  // predicted uses in one micro-batch
  size_t pos_ = 0;                                  // index in order_ after the last use
  int64_t gathers_ = 0;
};

}  // namespace strata::parallel
