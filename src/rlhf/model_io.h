// The four models' files. A model is read from
//   a strata training run (its directory, its ckpt/ directory or one step-* directory): the
//       newest good checkpoint's fp32 weights ("master" under bf16, else "params"), the
//       architecture from its recorded configuration (strata train --ckpt-every; the SFT
//       policy of RLHF), or
//   a safetensors file written by strata rlhf: the tensors of model/gpt.h's table under
//       their GPT-2 names, plus "v_head.weight" (C) and "v_head.bias" (1) for a value model
//       (reward model, critic), the architecture in the metadata key "strata_config".
// Files are written atomically (temporary file + rename).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/files.h"
#include "model/gpt.h"
#include "nlohmann/json.hpp"

namespace strata::rlhf {

struct ModelFile {
  model::GPTConfig cfg;
  std::vector<float> params;  // num_params() floats, build_param_table(cfg) layout
  std::vector<float> head;    // value head: C weights then the bias; empty when absent
  nlohmann::json metadata = nlohmann::json::object();
};

// flag names the option in errors ("--actor"). Throws one line for a missing file, a run
// without checkpoints or a damaged one.
ModelFile load_model(const std::string& path, const std::string& flag);

// Writes params (and head, when not empty) with cfg and extra string metadata.
void save_model(const std::string& path, const model::GPTConfig& cfg, const float* params,
                const std::vector<float>& head, const nlohmann::json& extra = {});

// Extra named flat tensors (optimizer moments, run state) in one safetensors file, for
// checkpoints of a PPO run; metadata is any JSON object (stored as one string).
struct NamedTensor {
  std::string name;
  const float* data = nullptr;
  int64_t n = 0;
};
void save_tensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                  const nlohmann::json& metadata);
// Reads them back into `tensors` (data written through; sizes must match). Returns metadata.
nlohmann::json load_tensors(const std::string& path, const std::vector<NamedTensor>& tensors);

// <run-dir>/metrics.jsonl of an RLHF run, opened for writing: a resumed run (done > 0) keeps
// the records whose `key` ("iteration", "step") is at most done, the rest are dropped.
LineLog open_run_log(const std::string& run_dir, const char* key, int64_t done, const std::string& what);

nlohmann::json config_json(const model::GPTConfig& cfg);
// The same layers, width, heads, context and vocabulary: one can stand in for the other.
bool same_shape(const model::GPTConfig& a, const model::GPTConfig& b);
std::string describe(const model::GPTConfig& cfg);  // "layers 2, dim 64, heads 2, ..."

}  // namespace strata::rlhf
