// Incremental decoding with a key/value cache: the GPT of model/gpt.h run one new token per
// sequence at a time, each step attending over the keys and values of every earlier position
// kept from the steps before, instead of recomputing the whole prefix (train/generate.cc).
//
// Terms: B sequences, P prompt tokens, S = cfg.seq positions at most, L layers, C channels,
// NH heads of hs = C / NH, Vp padded vocabulary.
//   prefill(tokens (B, P))  the prompt through every layer as one (B·P)-row pass (the model's
//                           own kernels, flash attention included), keeping each layer's
//                           k and v rows; returns the logits of position P-1: (B, Vp)
//   step(tokens (B))        one position more: x = wte[tok] + wpe[pos], per layer the block's
//                           attention input (ln_1, qkv (B, 3C)), k and v appended to the
//                           cache, attention of the one query over positions 0..pos
//                           (kernels::attention_decode), the rest of the block (projection,
//                           MLP); ln_f; logits (B, Vp)
// Both run model/block.h's passes (prefill the whole block_forward; a step its parts around
// the cached attention) on one rank, with the row pass for the products of a few rows.
// Same arithmetic as GPT::logits over the whole sequence up to fp32 rounding: prefill is
// bit-identical (the same kernels on the same rows), a step sums the attention of one query
// in another order than the tiled kernel does.
// Cache: K and V of (L, B, S, Ckv) floats each = 2·L·B·S·Ckv·4 bytes (cache_bytes()), counted
// as activations in the memory tracker; Ckv = C, or NKV·hs for Llama blocks with grouped-query
// attention (NKV/NH of multi-head attention's cache). Llama blocks (model/block.h): RMSNorm,
// q and k turned by RoPE at each row's position, SwiGLU, lm_head unless tied; the same
// kernels as the model's. Cost of a step: 2·B·(12·L·C² + C·Vp) GEMM flops plus
// 4·B·L·pos·C for attention, against ~pos times the GEMM work without the cache.
// Parameters are read from a flat fp32 buffer in the layout of build_param_table(cfg) (one
// process, no tensor parallelism), bound with bind() and read, never written.
#pragma once
#include <cstdint>
#include <vector>

#include "core/memory.h"
#include "model/block.h"
#include "model/gpt.h"
#include "model/tensor/collectives.h"

namespace strata::rlhf {

class KvDecoder {
 public:
  // Cache and scratch for up to max_batch sequences of cfg.seq positions.
  KvDecoder(const model::GPTConfig& cfg, int max_batch);
  // params: num_params() floats laid out as build_param_table(cfg); must outlive the calls.
  void bind(const float* params) { params_ = params; }
  // Starts B sequences from their prompts (B, P), 1 <= P <= cfg.seq; returns the logits
  // (B, Vp) of the last prompt position (valid until the next call).
  const float* prefill(const int32_t* tokens, int B, int P);
  // Appends one token per sequence (B) at position position(); returns their logits (B, Vp).
  const float* step(const int32_t* tokens);
  int position() const { return pos_; }  // tokens held per sequence
  int batch() const { return B_; }
  int max_batch() const { return max_batch_; }
  int64_t cache_bytes() const { return int64_t(cache_.bytes()); }

 private:
  const float* view(int index) const;  // null for index -1 (a view Llama blocks lack)
  int block_view(int layer, int i) const;
  int64_t kv_width() const;  // key (or value) columns: NKV·hs
  // What block l's passes (model/block.h) run over for B sequences of T rows in the scratch:
  // its weights, the rows' shapes on one rank, and the activations, x_ updated in place.
  model::Block weights(int l) const;
  model::TpDims dims(int B, int T) const;
  const float* head(const float* x);  // ln_f + logits of B rows (B, C) -> (B, Vp)

  model::GPTConfig cfg_;
  int max_batch_;
  std::vector<model::ParamView> table_;
  model::BlockArch arch_;
  const float* params_ = nullptr;
  Buffer cache_, scratch_;
  float *k_ = nullptr, *v_ = nullptr;                              // (L, B, S, Ckv) each
  // Scratch for up to max_batch · S rows: x (C), ln (C), qkv (3C), att (C), fc and gelu (4C
  // each), attention lse (NH), norm statistics; logits (max_batch, Vp).
  float *x_, *ln_, *qkv_, *att_, *fc_, *gelu_, *lse_, *mean_, *rstd_, *last_, *logits_;
  model::LayerActs acts_{};   // a block's activations in that scratch (every block's in turn)
  model::TensorComm one_;     // one rank: the block's collectives do nothing
  model::TpScratch nothing_;  // fp32 at tp 1 needs no scratch
  int B_ = 0, pos_ = 0;
};

}  // namespace strata::rlhf
