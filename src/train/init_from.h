// `strata train --init-from DIR`: a Hugging Face model directory (ckpt/hf.h: GPT2LMHeadModel or
// LlamaForCausalLM, one model.safetensors or sharded) as the run's initial parameters.
//
// The model is the one DIR/config.json describes (hf_model_config; the command refuses shape
// flags that contradict it). Every rank fills its own share of the engine's parameter state
// through its TensorLayout, the map a checkpoint load uses (ckpt::fill_from_global, beside
// CheckpointReader::read), so one process, tp, pp, cp, ZeRO 1-3 and bf16 all start from the
// same values; the optimizer moments start at zero and the step count at 0. A rank reads one
// global tensor at a time (converted to fp32, transposed from Conv1D, padded to strata's
// vocabulary rows), so the extra memory is the largest tensor, not the model.
//
// With --resume, the checkpoint wins: the import runs first and a loaded checkpoint replaces
// it (so `--resume auto --init-from DIR` starts from DIR once, then continues its own run).
#pragma once
#include <string>
#include <vector>

#include "ckpt/chunks.h"
#include "ckpt/hf.h"
#include "core/tensor_layout.h"
#include "model/model_part.h"
#include "parallel/engine.h"

namespace strata::train {

// The model config.json describes (arch, layers, dim, heads, kv_heads, ffn, max seq, vocab
// padded to 64, norm eps, rope theta, tied head).
model::GPTConfig hf_model_config(const ckpt::HfModel& m);

// The whole model's tensors (names, global shapes, one-process offsets).
std::vector<ckpt::TensorInfo> global_tensor_table(const model::GPTConfig& cfg);

// Checks DIR against the model before any rank starts: config, files, every tensor's name,
// shape and dtype. Throws one Error listing every problem. With `values`, also reads every
// tensor, refusing one that holds a NaN or an infinity (the launcher's check; a rank's own
// read refuses them too).
void check_init_from(const std::string& dir, const model::GPTConfig& cfg, bool values);

// Fills this rank's share of `engine`'s parameters (the "params" state: the fp32 weights, or
// the bf16 run's fp32 master) from DIR, `layout` placing its flat space in the global tensors,
// and lets the engine re-derive its working copies. Returns the line the run prints.
std::string init_from_hf(const std::string& dir, const model::GPTConfig& cfg,
                         const TensorLayout& layout, parallel::StepEngine& engine);

}  // namespace strata::train
