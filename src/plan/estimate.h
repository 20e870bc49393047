// Memory, communication and time of one training step under one layout.
//
// Memory per GPU (the heavier of the first and last pipeline stage):
//   model states   zero_model_state_bytes() on the stage's dense parameters (ZeRO group
//                  dp·cp) plus its expert parameters (ZeRO group dp·cp/ep)
//   activations    a model and layout strata runs (engine_runs): the engine's buffers
//                  on the largest tp rank, as `strata train` allocates them (pp = 1:
//                  cost::activation_buffers, with cp cost::cp_activation_bytes; pp > 1:
//                  cost::stage_activation_buffers with each chunk's slots from the
//                  schedule); any other (MoE, tp above the KV heads): Korthikanti et al.'s
//                  layer_activation_bytes() × the stage's blocks × their slots, + embedding
//                  dropout mask (first stage), + final norm, head input and fp32 logits
//                  4sbV/t (last stage), + one un-recomputed layer under full recomputation.
//                  Slots per chunk: the schedule's (1F1B: stage i holds min(p − i, m);
//                  GPipe m), ⌈L/(p·V)⌉ blocks per chunk
//   comm buffers   ZeRO-1/2: two reduce-scatter buckets; ZeRO-3: two gathered layers
//                  (current and prefetched) and one layer of gradients; SP all-gather of one
//                  layer input; PP send/recv; EP dispatch/combine; CP ring K/V blocks (the
//                  engine's activations already hold its SP gather and cp buffers)
// Overlap: DP/ZeRO traffic and ring-attention K/V passing hide behind `overlap` × the compute
// they run beside (1 = perfectly); tensor, Ulysses, expert and pipeline traffic is exposed.
// Time per step: a micro-batch costs, on one stage,
//   t_mb = compute (forward + backward = 3 forward) + recomputation + exposed TP, CP, EP
//          and per-micro-batch ZeRO-2/3 communication
// (a third of the communication in the forward, recomputation in the backward; zero-bubble
// splits the backward's compute evenly into B and W). Recomputation: full, one more forward of
// every block (with its tp, cp and ep collectives); selective, strata's elementwise work (the
// two norms and, under fp32, the GELU/SwiGLU output: cost::selective_recompute_per_token),
// the slower of its operations at the sustained FLOP rate and its bytes at HBM bandwidth, or
// for a model on Korthikanti's terms the attention core again; under zero-bubble strata's W
// recomputes a second time. The pipeline runs the setup's
// schedule over the p stages with those F, B, W times and one send_recv of the stage's
// activation per stage-to-stage message (parallel/pipeline/predict.h, the model the training
// summary's planned bubble uses): its makespan without the transfers less m·t_mb is the
// bubble ((p−1)/(m+p−1) of the schedule for 1F1B and GPipe, (p−1)/(v·m+p−1) interleaved),
// what the transfers add is the exposed pipeline communication. After the pipeline drains:
// the gradient reduction not hidden behind the last micro-batch's backward, the ZeRO-1/2
// parameter all-gather not hidden behind a forward, and the optimizer step (state bytes
// read and written at HBM bandwidth).
#pragma once
#include <string>
#include <vector>

#include "cost/comm.h"
#include "cost/shapes.h"
#include "plan/layout.h"

namespace strata::plan {

struct MemoryEstimate {
  int64_t dense_params = 0;  // parameters on this GPU before ZeRO sharding
  int64_t expert_params = 0;
  int64_t muon_params = 0;  // --optimizer muon: the matrix elements among them
  double ns_flops = 0;      // and their Newton-Schulz FLOPs per step, all matrices once
  ModelStateBytes states;  // after ZeRO sharding
  double activations = 0;
  double comm_buffers = 0;
  int in_flight = 1;           // micro-batches whose activations the stage holds (its slots)
  bool engine_activations = false;  // activations from strata's buffers (else Korthikanti)
  const char* stage = "only";  // which stage is the heaviest: "first", "last" or "only"
  double total() const { return double(states.total()) + activations + comm_buffers; }
};

struct CommItem {
  std::string dim;   // "tp", "cp", "ep", "pp", "dp", "dp-expert"
  std::string what;  // e.g. "2 all-reduces per layer fwd + 2 bwd"
  Collective op = Collective::allreduce;
  int group = 1;
  bool inter_node = false;
  double bytes_per_call = 0;
  double calls_per_step = 0;
  double time_s = 0;     // per step, if nothing overlapped
  double exposed_s = 0;  // per step, on the critical path
};

struct TimeBreakdown {  // seconds per step; the parts sum to step_s
  double compute = 0, recompute = 0, tp = 0, cp = 0, ep = 0, pp = 0, zero_micro = 0;
  double bubble = 0, dp_final = 0, optimizer = 0;
  double t_micro = 0;  // one micro-batch on one stage
  double step_s = 0;
};

struct Estimate {
  Layout layout;
  int64_t micro_batches = 0;
  MemoryEstimate mem;
  double usable_bytes = 0;
  bool fits = false;
  std::vector<CommItem> comm;
  TimeBreakdown time;
  double model_flops_per_step = 0;     // 6N + 12·L·h·s per token, no recomputation
  double hardware_flops_per_step = 0;  // what the GPUs execute, with recomputation
  double tokens_per_s = 0;
  double mfu = 0;
  // The pipeline's idle share of its schedule, mean over stages: with the transfers, and
  // without them (the schedule's formula for equal stages).
  double pipeline_bubble = 0, pipeline_bubble_ideal = 0;
  double pp_transfer_s = 0;  // one stage-to-stage message
  double pipeline_formula = 0;  // the schedule's formula (parallel/pipeline/schedule.h)
  double bubble_fraction() const { return pipeline_bubble; }
};

// Whether strata's engine runs this model's layer, so that its activations are the engine's
// buffers (cost/activations.h): GPT-2 blocks (multi-head attention, a GELU MLP of 4h,
// LayerNorm, biases, learned positions, tied embedding; strata's GPT has no dropout: no masks)
// or Llama blocks (SwiGLU of any width, RMSNorm, no biases, rotary, grouped-query attention,
// tied or not), dense. MoE keeps Korthikanti et al.'s per-layer terms.
bool engine_describes(const ModelSpec& m);
// ... and whether `strata train` runs it in this layout: its tp ranks take whole KV heads
// (tp dividing the KV heads), where the planner would replicate them.
bool engine_runs(const ModelSpec& m, const Layout& l);
// Why a layout's activations are Korthikanti et al.'s terms (the memory table's note).
std::string korthikanti_reason(const ModelSpec& m, const Layout& l);
// The model as the engine's cost models see it (engine_describes(m)), every block
// recomputed under full recomputation.
cost::GptShape engine_shape(const ModelSpec& m, Recompute r);
// Activation slots of each chunk of pipeline stage `stage` of pp under the setup's schedule
// with `micro` micro-batches per step: what the engine sizes (parallel/pipeline/executor.h's
// slots_for).
std::vector<int> chunk_slots_of(const TrainSetup& setup, int pp, int64_t micro, int stage);

// Assumes layout_problem(setup, l) is empty.
Estimate evaluate(const TrainSetup& setup, const Layout& l);
// Memory only (cheaper; used when scanning cluster sizes).
MemoryEstimate estimate_memory(const TrainSetup& setup, const Layout& l);

// Parameters on one GPU of one pipeline stage after TP, PP and EP sharding.
struct StageParams {
  int64_t dense = 0;
  int64_t expert = 0;
  int64_t largest_layer = 0;  // one layer's parameters on this GPU (ZeRO-3 gather unit)
  int64_t muon_dense = 0, muon_expert = 0;  // the blocks' matrix elements (Muon's)
  int64_t layers = 0;                       // blocks on the stage
  int64_t dense_blocks = 0;                 // the dense parameters of those blocks
  double ns_flops = 0;  // Newton-Schulz FLOPs of one Muon step over the stage's matrices (5 iterations)
};
StageParams stage_params(const ModelSpec& m, const Layout& l, bool first, bool last);

}  // namespace strata::plan
