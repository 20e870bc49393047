// Hugging Face model directories in and out: GPT2LMHeadModel and LlamaForCausalLM.
//
// A directory is config.json plus the weights, either one model.safetensors or shards
// model-0000i-of-0000n.safetensors listed by model.safetensors.index.json ({"weight_map":
// {tensor: file}}). The names and layouts (hf_gpt2.cc, hf_llama.cc):
//   gpt2   transformer.{wte,wpe}.weight, transformer.h.{l}.{ln_1,attn.c_attn,attn.c_proj,ln_2,
//          mlp.c_fc,mlp.c_proj}.{weight,bias}, transformer.ln_f.*; the four matrices of a block
//          are Conv1D [in, out] (strata keeps nn.Linear's [out, in]: transposed both ways);
//          "transformer." is optional on import (HF's own gpt2 files have none); the head is
//          tied to wte.
//   llama  model.embed_tokens.weight, model.layers.{l}.{input_layernorm,post_attention_layernorm,
//          self_attn.{q,k,v,o}_proj,mlp.{gate,up,down}_proj}.weight, model.norm.weight, and
//          lm_head.weight unless tie_word_embeddings; strata's names are these without
//          "model.", all [out, in], and its RoPE pairs head columns as HF's rotate_half does,
//          so nothing is permuted.
// strata's embedding (and untied head) rows past the real vocabulary are padding: an export
// drops them, an import zeroes them. Import reads F32, BF16 and F16.
//
// Import checks everything before it reads a value: config keys strata does not implement
// (rope_scaling, biases, another activation or head_dim, ...), unknown, missing or
// misshapen tensors, a weight_map naming a missing file or a tensor its file lacks, and every
// safetensors header (read_safetensors: a truncated data section, offsets past the file).
// Each problem is one line of the Error, all of them together.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/chunks.h"
#include "ckpt/safetensors.h"

namespace strata::ckpt {

// A model as config.json describes it, in strata's terms (model::GPTConfig's fields).
struct HfModel {
  std::string arch;  // "gpt2" or "llama"
  int64_t layers = 0, dim = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, max_seq = 0;
  double norm_eps = 1e-5, rope_theta = 10000;
  // Llama 3.1's rope_scaling "llama3" (kernels/rope.h); rope_factor 0: none.
  double rope_factor = 0, rope_low = 1, rope_high = 4, rope_original = 8192;
  bool tie = true;          // the output layer is the input embedding
  std::string torch_dtype;  // as config.json states it ("" when absent)
};

// Reads and checks DIR/config.json (model_type gpt2 or llama). `what` names the flag.
HfModel read_hf_config(const std::string& dir, const std::string& what = "--init-from");

// A Hugging Face directory opened for import into a model whose one-process tensor table is
// `table` (names and global shapes; model::build_param_table). The constructor reads only
// config.json and the safetensors headers, and throws one Error listing every problem.
class HfImport {
 public:
  HfImport(const std::string& dir, const std::vector<TensorInfo>& table,
           const std::string& what = "--init-from");
  ~HfImport();
  const HfModel& model() const { return model_; }
  const std::string& dir() const { return dir_; }
  // The strata tensors it fills and the dtypes the files hold ("BF16", "F32, BF16", ...).
  int tensors() const { return int(sources_.size()); }
  std::string dtypes() const;
  // Writes global tensor `t` of the table (numel(t.shape) floats, strata's layout: [out, in],
  // padding rows zero) to `out`.
  void read(const TensorInfo& t, float* out) const;

 private:
  struct Source;
  struct Files;
  std::string dir_, what_;
  HfModel model_;
  std::unique_ptr<Files> files_;
  std::map<std::string, std::unique_ptr<Source>> sources_;  // by strata name
};

struct HfImportResult {
  int tensors = 0;  // strata tensors filled
  HfModel model;    // the directory's config
};

// Fills the flat fp32 buffer `params` (numel elements laid out by the one-process `table`)
// from Hugging Face directory `dir`.
HfImportResult import_hf(const std::string& dir, const std::vector<TensorInfo>& table,
                         float* params, int64_t numel, const std::string& what = "--init-from");

struct HfExportResult {
  std::string source_dir;  // the checkpoint exported
  std::string state;       // "master" or "params"
  std::string arch;        // "gpt2" or "llama"
  int tensors = 0;
  int64_t bytes = 0;  // of model.safetensors
};

// Writes step directory `dir` (any layout) as a Hugging Face directory of its architecture
// that transformers' from_pretrained(out_dir) loads: config.json and model.safetensors. dtype
// "" keeps the saved one, or "F32" / "BF16". A checkpoint with MoE blocks is refused. The
// directory is written whole into <out>.tmp-export and renamed to <out>, so a failed export
// leaves no half directory; <out> may be absent, empty, or an earlier export (config.json
// and model.safetensors only), which it replaces. `what` names the output in errors.
HfExportResult export_hf(const std::string& dir, const std::string& out_dir,
                         const std::string& dtype = "", const std::string& what = "--hf");

}  // namespace strata::ckpt
