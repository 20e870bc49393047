// Shared pieces of the data-parallel tests: a small GPT, a deterministic global batch per
// step, a plain single-process reference trainer, and a runner that trains the same
// batches with the data-parallel engine on N ranks (threads of this process).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/context/layout.h"
#include "model/gpt.h"
#include "parallel/data_parallel.h"

namespace strata::ptest {

model::GPTConfig small_config();  // 2 layers, dim 64, 4 heads, seq 16, vocab 64

struct RunSpec {
  int steps = 20;
  int batch = 12;  // global batch in sequences (divisible by 1, 2, 3, 4)
  int T = 16;
  int accum = 1;  // micro-batches per rank per step
  float lr = 3e-3f;
  uint64_t seed = 5;
  parallel::OptimConfig optim;
  model::GPTConfig model = small_config();
  DType compute = DType::f32;  // the model's matmul precision (reference and engine runs alike)
};

struct RunResult {
  std::vector<double> losses;     // per step, mean over the global batch's real tokens
  std::vector<float> grad_norms;  // per step, before clipping
  std::vector<float> params;      // fp32 weights after the last step
  parallel::MemoryReport memory;  // rank 0's engine buffers
  int64_t ep_bytes = 0;           // MoE: all-to-all payload of every rank over the run
  int64_t ep_rows = 0;            // MoE: token rows every rank dispatched over the run
  int64_t grad_reduce_bytes = 0;  // rank 0's gradient reductions in the last step
  int64_t expert_grad_reduce_bytes = 0;  // of which the expert region's (MoE)
};

// Single process, fp32 state and optimiser (matmuls in spec.compute), full buffers: zero,
// forward/backward per micro-batch, clip, AdamW.
RunResult run_reference(const RunSpec& spec);

// The same batches on `world` ranks (threads); results of rank 0, after checking that every
// rank saw the same losses and norms.
RunResult run_data_parallel(const RunSpec& spec, int world,
                            const parallel::DataParallelOptions& opts);

// Tensor parallelism: world = tp x dp threads in mesh order (parallel/mesh.h); the model is
// each rank's tp shard, the engine runs over the dp group. params are the fp32 weights in the
// one-process layout, assembled from every tp rank's pieces (model::tensor_layout);
// tp_bytes the tensor-parallel payload of the last step (rank 0).
// With cp > 1 (context parallelism) each of the cp ranks of a (tp, dp) position keeps its
// chunks of the sequences and the engine reduces over dp x cp.
struct TpRun {
  int tp = 1, dp = 1;
  bool sp = true;
  int cp = 1;
  model::CpOptions cp_opt;
  int ep = 1;  // expert-parallel ranks (an MoE model), carved out of dp
  parallel::DataParallelOptions opts;
};
RunResult run_tensor_parallel(const RunSpec& spec, const TpRun& run, int64_t* tp_bytes = nullptr);

// Pipeline parallelism: world = pp x dp x tp threads in mesh order; each rank a stage
// (model::StageModel; with tp > 1 its tp shard, sequence parallel when sp) running the
// schedule with its executor; accum micro-batches per step. params are the fp32 weights in
// the one-process layout, assembled from the stages' (and tp ranks') pieces.
// With cp > 1 every stage's cp ranks keep their chunks of the sequences (world x cp threads).
struct PpRun {
  int pp = 2, dp = 1, virt = 1;
  int tp = 1;
  bool sp = true;
  int cp = 1;
  model::CpOptions cp_opt;
  int zero = 0;  // ZeRO stage 0-3 over the stage's dp·cp replicas
  bool reduce_bf16 = false;  // --reduce-dtype bf16
  std::string schedule = "1f1b";
  std::vector<int> split;  // --pp-split; empty: balanced
};
// tp_bytes: rank 0's tensor-parallel payload over the whole run (TensorComm::bytes).
RunResult run_pipeline(const RunSpec& spec, const PpRun& run, int64_t* tp_bytes = nullptr);

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b);
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace strata::ptest
