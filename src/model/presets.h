// The models strata knows by name: its own test and benchmark shapes and published ones, in
// one table that `strata train --model`, `strata plan --model` (and --critic), rlhf and fed
// all read. A model that does not fit the machine is refused by the command, not missing from
// the table. Light on purpose (no engine headers): the Python module compiles it with the
// planner.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cost/shapes.h"  // the width rules

namespace strata::model {

struct ModelPreset {
  std::string name;
  bool llama = false;  // Llama blocks (model_part.h Arch::llama); false: GPT-2 blocks
  int64_t layers = 0, dim = 0, heads = 0;
  int64_t kv_heads = 0;  // 0: heads
  int64_t ffn = 0;       // 0: the width rule (4·dim, or llama_ffn(dim))
  int64_t seq = 0;       // context: maximum sequence (GPT-2's position rows)
  int64_t vocab = 0;
  float rope_theta = 10000.0f;
  float rope_factor = 0.0f;  // Llama 3.1's "llama3" rope scaling factor (0: none)
  bool tied = true;          // Llama: the output layer is the input embedding
  int64_t experts = 0, top_k = 0;  // Mixtral-style MoE blocks (0: dense)
  // What the planner also wants: the published global batch in sequences and training tokens
  // (0: unknown), and where the shape comes from.
  int64_t global_batch = 0;
  double train_tokens = 0;
  std::string source;
  bool published() const;  // a published shape, not one of strata's own
};

const std::vector<ModelPreset>& model_presets();
// The preset named `name`; throws one line listing the known names otherwise (the published
// ones first for the planner's reader, else in table order: "tiny, small, gpt2, ...").
const ModelPreset& find_model_preset(const std::string& name, bool published_first = false);
std::string model_preset_list(bool published_first = false);

// The width rules, defined once where the cost models count with them (cost/shapes.h), under
// the names train/ and cli/ call them by.
using cost::default_ffn;
using cost::llama_ffn;
using cost::padded_vocab;

}  // namespace strata::model
