// Data-parallel step engine with ZeRO stages 0-3 (Rajbhandari et al. 2020) over any
// ProcessGroup. What each rank holds (Ψ parameters, N ranks, S = ceil(Ψ/N), see layout.h):
//
//   stage  working params  gradients          optimizer (m, v; fp32 master under bf16)
//   0      Ψ               Ψ  (all-reduce)    Ψ
//   1      Ψ               Ψ  (reduce-scatter) S
//   2      Ψ               S  (reduce-scatter per bucket in backward; bucket buffers only)
//   3      S (gathered per unit around its use)   S       S
//
// The engine owns every parameter and gradient buffer and binds the model's units to them
// (the model is built with allocate_state = false), so the bytes it saves are really saved.
// Under bf16 the working parameters and gradients are bf16; the model reads fp32 weights
// (its matmuls round them to bf16 again, exactly) and accumulates fp32 gradients, so each
// unit in use is converted into an fp32 scratch slot before it runs and its fp32 gradients
// are rounded into the bf16 buffers after (docs/zero.md lists every buffer).
//
// Gradient contract: the trainer scales every micro-batch's backward by 1 / (real tokens of
// the whole global batch), so each rank's accumulated gradient is its share of the global
// mean and a SUM across ranks (all-reduce or reduce-scatter with ReduceOp::sum) is exactly
// the token-weighted mean over the global batch, whatever the split into ranks and
// micro-batches.
//
// Driving it (the StepEngine contract, identical on every rank):
//   engine.begin_step(); for m: { engine.begin_micro(m, A); model.forward; model.backward; }
//   engine.end_backward(); norm = engine.step(lr);
// Every rank must run forward and backward for every micro-batch, with B = 0 when it has no
// samples: the model then only calls its hooks, and the engine's collectives stay matched.
// Eval forwards and logits() (sampling) must likewise run on every rank at stage 3.
//
// Mixture of Experts (parallel/region.h): the expert units of an MoE model form a second
// region whose gradients reduce, and whose ZeRO shards spread, over the expert-data-parallel
// group `edp` (ExpertGroups) instead of `group`: with expert parallelism P a rank holds only
// its E/P experts, so its model states are zero_model_state_bytes(Ψ_dense, |group|, stage) +
// zero_model_state_bytes(Ψ_experts, |edp|, stage) and its reduction moves Ψ_dense + Ψ_experts
// elements per step. Stages, bf16 and the reduce dtype apply to both regions alike. The
// global gradient norm counts every element once: at stages 1-3 each rank of `group` adds
// its dense and expert shards and one sum over `group` covers both (the edp groups of the
// P expert-parallel ranks partition the experts); at stage 0 the expert squares of one
// expert-parallel group are summed over `ep` and added to the dense ones.
//
// Pipeline parallelism: the model is one stage (model/stage.h: a ModelPart whose units are
// the ones it holds; its chunks never share a gradient bucket) and `group` the stage's dp·cp
// replicas. The first and last stage both hold unit 0 (the tied embedding: the embedding's
// and the logits' contributions): it is a region of its own there, so its ZeRO shards line
// up between the two stages, and end_backward sums its gradients (or this rank's shard of
// them) over the embed group, in fp32, after the dp reduction (Megatron's approach); both
// copies then take the same update. The global gradient norm adds the stages' squares over
// the pp group, unit 0 counted on the first stage only. Zero-bubble's split backward calls a
// unit's after-hook from its weight pass: its gradients accumulate in place (stages 0-1).
//
// Tensor parallelism: with a model built on a tp group (model::GPT's TensorComm), `group`
// is the data-parallel group of the mesh (parallel/mesh.h) and everything above applies to
// the rank's local flat buffer. Replicated views (norms, wpe, row-parallel biases; key/value
// heads shared by several tp ranks) get the same gradients and updates on every rank holding
// them; the global gradient norm adds the squares over the tp group, counting each replicated
// view on its primary rank only (tp rank 0, or the first rank sharing the head).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/dtype.h"
#include "core/memory.h"
#include "model/gpt.h"
#include "nlohmann/json_fwd.hpp"
#include "parallel/engine.h"
#include "parallel/layout.h"
#include "parallel/options.h"
#include "parallel/region.h"

namespace strata::parallel {

// The groups of the expert region (null: `group`, the model holding every expert). edp:
// ranks holding the same experts; ep: the expert-parallel group the model was built with.
struct ExpertGroups {
  comm::ProcessGroup* edp = nullptr;
  comm::ProcessGroup* ep = nullptr;
};

// The groups of a pipeline stage (all null: the model is not one).
struct StageGroups {
  comm::ProcessGroup* pp = nullptr;     // this rank's pipeline: the norm's squares sum over it
  comm::ProcessGroup* embed = nullptr;  // first and last stage, on those two: unit 0's tie
  bool counts_unit0 = true;             // unit 0's squares count here (the first stage)
};

// Bytes of this rank's engine-owned buffers, by memory category. Model states (parameters,
// gradients, optimizer) equal zero_model_state_bytes(Ψ, N, stage, precision) exactly (an MoE
// model: moe_model_state_bytes, the sum over its two regions);
// comm holds the bucket and gather buffers, activations the bf16 engine's fp32 scratch (the
// model's own activations are counted by the process memory tracker, not here).
struct MemoryReport {
  int64_t parameters = 0, gradients = 0, optimizer = 0, activations = 0, comm = 0;
  int64_t model_states() const { return parameters + gradients + optimizer; }
  int64_t total() const { return model_states() + activations + comm; }
  nlohmann::json to_json() const;
};

class DataParallelEngine final : public StepEngine {
 public:
  // Binds every unit of `model` (built with allocate_state = false) to engine memory and
  // initialises the parameters with GPT-2 initialisation from `seed` (the same values on
  // every rank and for every stage). Throws for bad options before allocating anything.
  DataParallelEngine(model::ModelPart& model, comm::ProcessGroup& group,
                     const DataParallelOptions& opts, const OptimConfig& optim, uint64_t seed,
                     ExpertGroups experts = {}, StageGroups stage = {});
  ~DataParallelEngine() override;

  void begin_step() override;
  void begin_micro(int micro, int num_micro) override;
  void end_backward() override;
  float step(float lr) override { return step(lr, 0.0, nullptr); }
  float step_if(float lr, const std::function<bool(float norm)>& accept) override {
    return step(lr, 0.0, nullptr, &accept);
  }
  // step(lr) with `extra_sum_sq` (the squared gradient norm of parameters the caller keeps
  // and updates itself, the same on every rank) added to the global norm before clipping;
  // *clip (if not null) receives the clip factor applied, for the caller's own update. accept
  // (step_if's) is for callers without such parameters: a refused step leaves *clip unset.
  float step(float lr, double extra_sum_sq, float* clip,
             const std::function<bool(float norm)>* accept = nullptr);
  int64_t step_count() const override { return steps_; }

  const DataParallelOptions& options() const { return opts_; }
  // The dense region (the whole model without experts) and the expert region (null when
  // the model has no experts).
  const ShardLayout& layout() const { return regions_[0]->layout; }
  const std::vector<Bucket>& buckets() const { return regions_[0]->buckets; }
  const Region* expert_region() const;
  int64_t num_buckets() const;
  MemoryReport memory_report() const;
  MemoryReport memory_report(const Region& r) const;  // model states and comm of one region
  // Payload bytes of the model's tensor-parallel collectives in the last step's forward and
  // backward passes (0 without tensor parallelism).
  int64_t tp_bytes_last_step() const { return tp_bytes_last_step_; }
  // Payload bytes of this rank's gradient all-reduces / reduce-scatters in the last step (in
  // the reduce dtype, DataParallelOptions::reduce()); valid from end_backward() on.
  int64_t grad_reduce_bytes_last_step() const;
  int64_t grad_reduce_bytes_last_step(const Region& r) const;
  // Payload bytes of Muon's gathers and scatters of matrices in the last step (stages 1-3;
  // 0 at stage 0 and under AdamW).
  int64_t muon_bytes_last_step() const { return muon_bytes_last_step_; }

  // Checkpoint access (see StateShard). After writing into the shards, call
  // state_loaded(step_count): it restores the step count and re-derives the working
  // parameters (bf16 copy, all-gather of shards) on every rank.
  std::vector<StateShard> state_shards() override;
  void state_loaded(int64_t step_count) override;
  int zero_stage() const override { return opts_.stage; }
  const char* precision() const override { return precision_name(opts_.precision); }

  // The full fp32 parameters [0, Ψ) of this rank's flat space (its layout, model/gpt.h)
  // assembled on every rank (a collective at stages 1-3): for tests, exports and checkpoint
  // conversion. Bf16 working copies are widened.
  std::vector<float> gather_full_params();
  // The working fp32 parameters [0, Ψ) in place (stages 0-2 in fp32, where every rank holds
  // them whole, in one region); null otherwise (stage 3, bf16 or an MoE model: use
  // gather_full_params()).
  const float* full_params() const;

 private:
  Region& region_of(int unit, int* local);
  void add_region(comm::ProcessGroup& group, int first_unit, int end_unit, bool tied,
                  const char* tag, bool experts);
  void tie_embedding();
  void allocate_state(Region& r);
  void allocate_scratch();
  void init_params(uint64_t seed);
  void refresh_working_params(Region& r);  // working params from the optimizer's weights
  void before_unit(int unit, model::Pass pass);
  void after_unit(int unit, model::Pass pass);
  int scratch_slot(const Region& r, int local) const;
  float* fp32_params_for(Region& r, int local);  // compute pointer for a unit's parameters
  float* fp32_grads_for(Region& r, int local);   // compute pointer for a unit's gradients
  double local_grad_sum_squares(Region& r);
  void plan_optimizer(Region& r);
  void allocate_muon();
  float* optimizer_weights(Region& r);
  void apply_adamw(Region& r, float lr, float grad_scale);
  void apply_muon(Region& r, float lr, float grad_scale);
  void orthogonalise(const MuonMatrix& m, float* u, int ns_steps);

  model::ModelPart& model_;
  DataParallelOptions opts_;
  OptimConfig optim_;
  ExpertGroups expert_groups_;
  StageGroups stage_groups_;
  bool bf16_;
  DType wdtype_;  // working dtype of parameters and gradients
  int wbytes_;    // its size
  std::vector<std::unique_ptr<Region>> regions_;  // dense, then experts (MoE models)
  // bf16 compute scratch (category activations): fp32 params + grads of dense unit 0
  // (slot 0), of one other dense unit (slot 1) and of one expert unit (slot 2).
  Buffer scratch_;
  float* scratch_params_[3] = {nullptr, nullptr, nullptr};
  float* scratch_grads_[3] = {nullptr, nullptr, nullptr};
  int64_t scratch_version_[3] = {-1, -1, -1};  // params_version_ converted into the slot
  int scratch_unit_[3] = {-1, -1, -1};           // model unit
  Buffer muon_buffer_, muon_scratch_;  // Muon (apply_muon)
  int64_t muon_bytes_last_step_ = 0;
  int64_t steps_ = 0;
  int64_t tp_bytes_at_step_begin_ = 0, tp_bytes_last_step_ = 0;
  int64_t params_version_ = 0;  // bumped whenever the working parameters change
  model::Pass current_pass_ = model::Pass::forward;
};

std::unique_ptr<DataParallelEngine> make_data_parallel_engine(model::ModelPart& model,
                                                              comm::ProcessGroup& group,
                                                              const DataParallelOptions& opts,
                                                              const OptimConfig& optim,
                                                              uint64_t seed,
                                                              ExpertGroups experts = {});

}  // namespace strata::parallel
