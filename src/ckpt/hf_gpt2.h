// Hugging Face GPT-2 directories. Export writes one that transformers'
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
//
// Import is the inverse, to initialise a strata model from such a directory (this export, or
// transformers' save_pretrained): names with or without the "transformer." prefix (HF's own
// gpt2 weights have none), F32, BF16 or F16, the Conv1D matrices transposed back, wte's rows
// past vocab_size zeroed (strata's padding); lm_head is skipped when tied and refused when not
// (strata ties it), the attention-mask buffers of older files (attn.bias, attn.masked_bias)
// are skipped. Every other tensor must be one of GPT-2's with the shape the model implies.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/chunks.h"

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

struct HfImportResult {
  int tensors = 0;     // strata tensors filled
  int64_t vocab = 0;   // the file's vocab_size (rows of wte filled)
  int64_t heads = 0;   // the config's n_head, for the caller to check against its model
};

// Fills the flat fp32 parameter buffer `params` (numel elements laid out by the model's
// one-process `table`) from the GPT-2 directory `dir`. The config must match the table:
// n_layer, n_embd, n_positions (wpe's rows) and vocab_size <= wte's rows. Throws a one-line
// Error naming `what` (the flag, e.g. "--init-from") and the file.
HfImportResult import_hf_gpt2(const std::string& dir, const std::vector<TensorInfo>& table, float* params,
                              int64_t numel, const std::string& what = "--init-from");

}  // namespace strata::ckpt
