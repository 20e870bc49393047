// The models strata knows by name: its own test and benchmark shapes and published ones, in
// one table that `strata train --model`, `strata plan --model` (and --critic), rlhf and fed
// all read. A model that does not fit the machine is refused by the command, not missing from
// the table. Also the two sizing rules every description of a model shares: the padded
// vocabulary and Llama's default MLP width. Light on purpose (no engine headers): the Python
// module compiles it with the planner.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

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

// Rows of the embedding: the vocabulary rounded up to a multiple of 64 (50257 -> 50304), as
// Megatron and nanoGPT pad it.
int64_t padded_vocab(int64_t vocab);
// Llama's MLP width for width C: 8C/3 rounded up to a multiple of 256 (Meta's multiple_of).
int64_t llama_ffn(int64_t dim);
// The MLP width a model has unless given: 4C (GPT-2's GELU MLP) or llama_ffn(C) (SwiGLU).
inline int64_t default_ffn(bool llama, int64_t dim) { return llama ? llama_ffn(dim) : 4 * dim; }

}  // namespace strata::model
