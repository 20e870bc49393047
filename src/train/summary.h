// summary.json, built in one place: the trainer sets the run's own keys (configuration,
// losses, speed, memory, checkpoints) and each parallel dimension adds its section through
// the step runner's summary_sections (train/step_runner.h), after the last step:
//   data parallel     "parallel", "engine_memory", "model_states_formula", "experts"
//                     (train/distributed.cc, train/expert_state.h)
//   tensor parallel   "tensor_parallel" (train/distributed.cc)
//   context parallel  "context_parallel" (train/context_metrics.h)
//   pipeline          "pipeline" (train/pipeline_rank.cc)
//   overlap (--trace) "overlap" (train/distributed.cc)
// A section is one top-level key that no one else sets; its lines print under the run's
// last message, in the order the sections were added.
#pragma once
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace strata::train {

class SummaryBuilder {
 public:
  // Top-level key `key`; throws if another part of the run already set it.
  void set(const std::string& key, nlohmann::json value);
  // set() for every key of the object `keys`.
  void set_all(const nlohmann::json& keys);
  bool has(const std::string& key) const { return doc_.contains(key); }
  // A line printed under the run's last message.
  void line(std::string text) { lines_.push_back(std::move(text)); }

  const nlohmann::json& doc() const { return doc_; }
  // The lines, each after a newline (empty when none).
  std::string text() const;

 private:
  nlohmann::json doc_ = nlohmann::json::object();
  std::vector<std::string> lines_;
};

}  // namespace strata::train
