// Gradient buckets of the data-parallel engine: where each unit's gradients land, when a
// bucket's collective starts, and how reduced shards are accumulated (stages 0-3).
//
// A bucket (layout.h) is "ready" when the backward of its last unit finished (each unit's
// after-hook counts a pass; passes are counted per bucket, so a pipeline stage whose chunks
// run micro-batches in any interleaving needs no notion of "the current micro-batch"); its collective
// is then issued at once, asynchronously, so it runs on the communication thread while
// backward continues with the next units. Nothing waits until end_backward(), except a
// stage 2/3 bucket whose buffer is needed again (see below).
//
//   stage 0  all-reduce of the bucket's range of the full gradient buffer, in place.
//   stage 1  reduce-scatter of that range, in place: each rank keeps its shard's part.
//   stages 0-1 with A > 1 micro-batches: gradients accumulate locally and only the last
//            micro-batch communicates (the no_sync pattern: one reduction per step).
//   stage 2-3 there is no full gradient buffer. Gradients go to bucket buffers (category
//            comm): one for the last bucket (it holds unit 0, whose gradients build up
//            from the first to the last step of backward) and two that the other buckets
//            alternate between, so bucket k's reduce-scatter overlaps bucket k+1's backward
//            and bucket k+2 waits for k's collective before reusing its buffer. Each
//            micro-batch is reduce-scattered and added into the gradient shard (S elements).
// Bytes of bucket buffers: |last bucket| + min(2, buckets-1) · max |other bucket|, in the
// working dtype; a bucket is at most max(bucket cap, largest unit).
//
// Reduce dtype (options.h, `--reduce-dtype`): when it differs from the working dtype, a
// bucket is converted (rounded to bf16 or widened to fp32) into a wire buffer of the reduce
// dtype just before its collective, the collective sums there, and this rank's reduced part
// is converted back when it completes. The wire buffer (category comm) mirrors what may be
// in flight at once: the whole gradient range at stages 0-1 (every bucket can be in flight
// until end_backward), the bucket buffers at stages 2-3. bytes_this_step() counts each
// collective's payload (the bucket's elements times the reduce dtype's size). A group of one
// rank (e.g. the expert region when ep equals dp x cp) issues no collective and counts none.
#pragma once
#include <cstdint>
#include <vector>

#include "comm/work.h"
#include "core/memory.h"
#include "parallel/layout.h"

namespace strata::parallel {

struct Region;  // parallel/region.h

class GradReducer {
 public:
  explicit GradReducer(Region& region);
  void begin_step();
  void begin_micro(int micro, int num_micro);
  // Where unit u's working-dtype gradients accumulate in this micro-batch. Stages 2-3: a
  // region of the bucket buffer, zeroed on the first call of the micro-batch (this may wait
  // for an older bucket's collective to free the buffer).
  void* unit_grads(int unit);
  // Unit u's gradients are complete for this micro-batch.
  void unit_done(int unit);
  // Issues what is left, waits for every collective and folds stage 2-3 results into the
  // gradient shard. After it, each rank's reduced gradients are in place.
  void finish();
  // Waits for collectives in flight without issuing any (teardown).
  void wait_all();
  int64_t buffer_bytes() const { return int64_t(staging_.bytes() + wire_.bytes()); }
  // Payload bytes of the gradient collectives issued since begin_step().
  int64_t bytes_this_step() const { return bytes_step_; }
  DType reduce_dtype() const { return rdtype_; }
  bool idle() const;

 private:
  int slot_of(int bucket) const;
  char* slot_data(int slot) const;
  void launch(int bucket);
  void complete(int bucket);
  void end_cycle(int bucket);
  void close_partial_cycles();
  int bucket_units(int bucket) const;

  Region& r_;
  std::vector<int> bucket_of_unit_;
  std::vector<int> pending_;    // units of each bucket not yet done in its current pass
  std::vector<int> cycles_;     // passes of each bucket completed this step
  std::vector<bool> launched_step_;  // bucket reduced at least once this step
  std::vector<bool> launched_;  // collective issued and not yet completed
  std::vector<bool> acquired_;  // per unit: region zeroed this micro-batch (stages 2-3)
  std::vector<comm::WorkPtr> work_;
  int num_micro_ = 1;  // micro-batches of the step (begin_micro): stages 0-1 reduce after the last
  // Stages 2-3 bucket buffers.
  Buffer staging_;
  std::vector<int64_t> slot_offset_;  // element offset of each slot in staging_
  std::vector<int> slot_owner_;       // bucket using each slot, -1 if free
  // Reduce dtype and, when it differs from the working dtype, the wire buffer.
  DType rdtype_;
  Buffer wire_;
  int64_t bytes_step_ = 0;
  void* wire_data(int bucket) const;
  void unwire(int bucket);
};

}  // namespace strata::parallel
