// The trained PPO models (actor, critic trunk) on the data-parallel/ZeRO engine
// (parallel/data_parallel.h): building the engine with given weights, and whole-model
// checkpoint tensors assembled from and split back into every rank's ZeRO shards, so a
// checkpoint's layout does not depend on the rank count or the stage (one run may resume
// another's state with other --nproc / --zero).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "parallel/data_parallel.h"
#include "rlhf/model_io.h"

namespace strata::rlhf {

// A trained trunk's config under the run's recomputation policy (frozen models run forward
// only and keep nothing for a backward anyway).
model::GPTConfig recomputing(model::GPTConfig c, model::RecomputePolicy p);

// The engine for `gpt` (built with allocate_state = false) at ZeRO `stage`, fp32, over
// `group`, its parameters set to `params` (gpt.num_params() floats, alike on every rank).
std::unique_ptr<parallel::DataParallelEngine> make_trained_engine(model::GPT& gpt, comm::ProcessGroup& group,
                                                                  int stage,
                                                                  const parallel::OptimConfig& optim,
                                                                  const std::vector<float>& params);

// The engine's "params", "exp_avg", "exp_avg_sq" as whole Ψ-float tensors (a collective on
// sharded stages: every rank calls it), named "<prefix>.params" etc.
class FullState {
 public:
  FullState(parallel::DataParallelEngine& engine, comm::ProcessGroup& group, int64_t psi,
            const std::string& prefix);
  void gather();                                  // engine -> whole tensors
  void scatter(int64_t steps);                    // whole tensors -> engine shards, state_loaded
  const std::vector<NamedTensor>& tensors() const { return named_; }

 private:
  parallel::DataParallelEngine& engine_;
  comm::ProcessGroup& group_;
  int64_t psi_;
  std::vector<std::vector<float>> full_;  // params, exp_avg, exp_avg_sq
  std::vector<NamedTensor> named_;
};

}  // namespace strata::rlhf
