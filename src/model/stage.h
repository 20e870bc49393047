// One pipeline stage's part of the GPT (model/gpt.h): the blocks of its chunks, the embedding
// when it holds the first layer, the final norm and the loss when it holds the last, and
// activations for every micro-batch it holds in flight.
//
// Terms. A chunk is a contiguous range of blocks [begin, end) (a virtual stage,
// parallel/pipeline/schedule.h); the embed chunk also runs the embedding (unit 0: wte, wpe),
// the head chunk also the final LayerNorm (unit L+1) and the tied logits and cross-entropy
// (unit 0's wte). The stage holds the units its chunks use, in unit order, in one flat
// parameter buffer and one gradient buffer; param_table() names them with the one-process
// model's names and their offsets in these buffers, and tensor_layout() places them in the
// global tensors (checkpoints load any layout into any other).
//
// Activations: chunk c has slots[c] slots; micro-batch m uses slot m % slots[c], so a schedule
// must not hold more than slots[c] micro-batches of the chunk at once (the executor sizes the
// slots from the schedule). Per slot: the chunk's input (B·T, C), each block's activations
// (model/block.h), its output gradient as received and its input gradient to send, and on the head
// the final norm, logits (B·T, Vp) and losses. Backward scratch (B·T rows) is shared.
//
// The passes are the one-process model's (model/part.h, over the one block of model/block.h),
// so a stage chain computes the same numbers as model::GPT, bit for bit per block.
//
// Tensor parallel (a TensorComm of T > 1 ranks): the stage holds this tp rank's shard of its
// units (model/shard.h: the same views, local shapes, global names and boxes in
// tensor_layout()) and runs the same passes over its tp group (model/block.h; the embedding
// and the logits vocab-parallel). The residual stream a slot keeps, receives and sends is
// this rank's n = tc.local_rows(B·T) rows: with sequence parallelism its 1/T row slice, so
// only that slice crosses stages (each tp rank to its peer of the next stage), else the
// whole (B·T, C) activation. Zero-bubble's split backward runs the tensor-parallel block in
// two passes (model/block.h): the weight pass all-gathers the norm outputs
// again under SP instead of keeping their gathered copies.
//
// Context parallel (a ContextComm of C > 1 ranks, model/context/context_comm.h): the stage
// keeps this cp rank's chunks of every sequence (model/context/layout.h): set_inputs takes the
// micro-batches' local rows (B, T/C), the embedding adds each row's global position, every
// block's attention runs over the stage's cp group (ring or Ulysses) and the head's loss is the
// sum over the local rows (the cp ranks' sums add up to the sequence's). So a slot keeps,
// receives and sends n = B·T/C rows (with tp, its tp share of those), each cp rank to its peer
// of the next stage. Ulysses keeps a head-sharded output per layer and slot (the key
// layer + L·slot), so micro-batches in flight never share one.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/memory.h"
#include "core/tensor_layout.h"
#include "model/chunk.h"
#include "model/expert/moe.h"
#include "model/model_part.h"

namespace strata::model {

struct Part;  // model/part.h
struct Slot;

class StageModel : public ModelPart {
 public:
  // slots[c]: activation slots of chunk c; max_batch: the largest micro-batch (sequences).
  // split_backward: keep per slot what backward_weight needs (zero-bubble schedules): each
  // block's output gradients of its four linear layers, B·T·(2C + 7C/T) floats per block
  // (9·B·T·C without tp).
  // tp: the tensor-parallel group's communicator (outlives the model), or nullptr.
  // cp: the context-parallel group's (outlives the model), or nullptr.
  // allocate_state = false: no flat buffers; the caller binds every unit (the data-parallel
  // engine, parallel/data_parallel.h, owns the stage's parameters and gradients).
  // ep: an MoE model's expert-parallel group (outlives the model), or nullptr: the stage
  // holds the expert units of its MoE blocks (E/ep experts each, as model::GPT does) and
  // keeps each block's routing state per activation slot.
  StageModel(const GPTConfig& cfg, std::vector<StageChunk> chunks, std::vector<int> slots,
             int max_batch, DType compute = DType::f32, bool split_backward = false,
             TensorComm* tp = nullptr, ContextComm* cp = nullptr, bool allocate_state = true,
             comm::ProcessGroup* ep = nullptr);
  ~StageModel() override;
  StageModel(const StageModel&) = delete;
  StageModel& operator=(const StageModel&) = delete;

  const GPTConfig& config() const { return cfg_; }
  const std::vector<StageChunk>& chunks() const { return chunks_; }
  DType compute() const { return compute_; }
  bool split_backward() const { return split_; }  // zero-bubble's two backward passes
  bool holds(int unit) const;  // a global unit (model/gpt.h)
  const std::vector<int>& units() const { return units_; }  // held units, in unit order
  // The ModelPart (model/gpt.h): the stage's units are its held units numbered in unit
  // order (local unit i is global unit units()[i]); hooks report those local numbers.
  int num_units() const override { return int(units_.size()); }
  int first_expert_unit() const override { return first_expert_; }
  bool tied_unit0() const override { return holds(0) && cfg_.tied(); }
  std::vector<int> chunk_starts() const override;
  std::pair<int64_t, int64_t> unit_range(int local) const override;  // in the flat buffers
  int64_t num_params() const override { return num_params_; }
  const std::vector<ParamView>& param_table() const override { return table_; }
  TensorLayout tensor_layout() const override;
  ExpertShard expert_shard() const override { return experts_; }
  TpShard shard() const { return shard_; }
  // The MoE blocks' layer (null when dense): its load statistics cover this stage's blocks.
  expert::MoE* moe() const;
  float* params() override { return params_.as<float>(); }
  float* grads() override { return grads_.as<float>(); }
  void bind_unit(int local, float* params, float* grads) override;
  void set_hooks(UnitHooks hooks) override;
  // [begin, end) of wte in the flat buffers (the tied embedding; empty if not held).
  std::pair<int64_t, int64_t> wte_range() const;

  // GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), LN w=1,
  // biases 0, wte rows past the real vocabulary 0. Each view draws from
  // Rng(seed, stream = its index in the one-process table), so values depend neither on the
  // layout nor on which stage holds the view.
  void init(uint64_t seed) override;
  // Sets every held unit's gradients to zero (wherever they are bound).
  void zero_grads();

  // The step's micro-batches (pointers held until the next call); under cp, the stage copies
  // this rank's rows of each (B, T) into (B, T/C) and runs on those. ids (empty, or one per
  // micro-batch): who the rows are, for an MoE router's jitter (model/expert/moe.h).
  void set_inputs(std::vector<MicroInput> micro, std::vector<SampleIds> ids = {});
  int num_inputs() const { return int(inputs_.size()); }
  TensorComm* tensor_comm() const override { return tc_; }
  ContextComm* context_comm() const { return cc_; }
  // Floats of one activation message of micro-batch m: n·C (n = B·T, or its 1/T slice
  // under tensor and sequence parallelism).
  int64_t message_floats(int micro) const;
  float* input(int chunk, int micro);             // (n, C) from the previous virtual stage
  const float* output(int chunk, int micro);      // (n, C) to the next one
  float* grad_input(int chunk, int micro);        // d loss / d output, from the next stage
  const float* grad_output(int chunk, int micro); // d loss / d input, to the previous stage

  // Forward of one chunk and micro-batch; returns the sum of weighted token losses on the
  // head chunk, else 0.
  double forward(int chunk, int micro);
  // Backward of scale · (that sum): parameter gradients accumulate (+=), the input gradient
  // goes to grad_output (or into the embedding's gradients).
  void backward(int chunk, int micro, float scale);

  // The same backward in two passes (zero-bubble): backward_input computes the input
  // gradient (and the cheap norm and embedding gradients) and keeps the linear layers' output
  // gradients; backward_weight then accumulates the linear layers' weight gradients (the
  // same products as backward, so the same numbers). Needs split_backward.
  void backward_input(int chunk, int micro, float scale);
  void backward_weight(int chunk, int micro);

  // Bytes of the activation slots and scratch (a GPT adds its copy of the inputs).
  virtual int64_t activation_bytes() const;
  // Wall time its backward passes spent recomputing what the blocks did not keep (GPTConfig::
  // recompute), since construction.
  int64_t recompute_ns() const;

  struct Chunk;

 protected:
  Part& part() const { return *part_; }  // the passes (model/part.h)
  Slot& slot(int chunk, int micro);

 private:
  std::pair<int64_t, int64_t> global_range(int unit) const;  // a held global unit's range
  int local_of(int unit) const;
  int slot_index(int chunk, int micro) const;

 protected:
  GPTConfig cfg_;
  std::vector<StageChunk> chunks_;
  DType compute_;
  bool split_;
  TensorComm* tc_;
  ContextComm* cc_;
  TpShard shard_;
  ExpertShard experts_;
  comm::ProcessGroup* ep_ = nullptr;
  int first_expert_ = 0;  // local index of the first held expert unit (num_units(): none)
  std::vector<int> units_;

 private:
  std::vector<int64_t> unit_begin_;  // per global unit: offset in the flat buffers, or -1
  std::vector<int64_t> unit_global_begin_;
  std::vector<ParamView> table_;
  int64_t num_params_ = 0;
  Buffer params_, grads_, acts_;
  std::unique_ptr<Part> part_;  // the passes (model/part.h)
  std::vector<std::unique_ptr<Chunk>> state_;
  std::vector<MicroInput> inputs_;
  std::vector<expert::TokenIds> ids_;  // per micro-batch, when set_inputs named them
  std::vector<int> positions_;         // cp: the global positions of this rank's rows
  std::vector<int32_t> cp_ids_;  // cp: the local rows of every micro-batch's tokens, targets
  std::vector<float> cp_weights_;
};

// Splits L layers into P·V contiguous chunks (virtual stage v gets chunk v), by `split` when
// given (P·V sizes summing to L: --pp-split), else balancing the estimated cost of each
// virtual stage (model/stage_cost.h; its overload takes measured costs). Throws one line
// naming the flag and the numbers.
std::vector<StageChunk> split_layers(const GPTConfig& cfg, int seq, int stages, int virt,
                                     const std::vector<int>& split);

}  // namespace strata::model
