// Export to a Hugging Face GPT-2 directory, one that transformers'
// GPT2LMHeadModel.from_pretrained(DIR) loads:
//   config.json        model_type "gpt2", n_embd, n_layer, n_head, n_positions = n_ctx,
//                      vocab_size (the real vocabulary: wte's padding rows are dropped),
//                      layer_norm_epsilon 1e-5, gelu_new (GPT-2's tanh GELU, strata's), tied
//                      embeddings, torch_dtype
//   model.safetensors  HF's names (transformer.wte.weight, transformer.h.{i}.attn.c_attn.weight,
//                      ...) with the four matrices of a block in Conv1D's [in, out] layout
//                      (strata keeps nn.Linear's [out, in], so they are transposed); c_attn's
//                      outputs are q | k | v with heads of C/heads each in strata as in HF, so
//                      the transpose is all it needs. No lm_head: GPT-2 ties it to wte.
// A checkpoint with MoE blocks has no GPT-2 equivalent and is refused. The directory is
// written whole into <out>.tmp-export (each file by the checked atomic writer) and renamed to
// <out> at the end, so a failed export leaves no half directory; <out> may be absent, empty, or
// an earlier export (config.json and model.safetensors only), which it replaces.
#pragma once
#include <cstdint>
#include <string>

namespace strata::ckpt {

struct HfExportResult {
  std::string source_dir;  // the checkpoint exported
  std::string state;       // "master" or "params"
  int tensors = 0;
  int64_t bytes = 0;       // of model.safetensors
};

// `dir` is a step directory; dtype "" keeps the saved one, or "F32" / "BF16". `what` names
// the output in errors (the flag, e.g. "--hf").
HfExportResult export_hf_gpt2(const std::string& dir, const std::string& out_dir, const std::string& dtype = "",
                              const std::string& what = "--hf");

}  // namespace strata::ckpt
