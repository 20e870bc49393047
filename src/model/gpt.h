// GPT-2 style decoder: pre-LayerNorm blocks, GELU MLP, tied input/output embedding; or Llama
// blocks (GPTConfig::arch: RMSNorm, RoPE, SwiGLU, grouped-query attention, untied lm_head). The
// one-process model is the model part (model/stage.h) of one chunk [0, L) holding the
// embedding and the head, with one activation slot; its units, views and hooks are those of
// model/model_part.h. This class adds the one-process entry points: forward and backward of a
// micro-batch of tokens, logits for inference, and the custom heads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/stage.h"

namespace strata::model {

class GPT final : public StageModel {
 public:
  // Allocates parameters, gradients and activations for micro-batches up to
  // (max_batch, cfg.seq) and counts them in the memory tracker. With allocate_state = false
  // the flat parameter and gradient buffers are not allocated: the caller binds every unit
  // (ZeRO-3 keeps only shards).
  // With `tp` (a tensor-parallel group of size T > 1, which must outlive the model) the
  // model is this rank's shard (model/shard.h) and its forward and backward communicate
  // over tp (the one block, model/block.h); every tp rank must then get the same tokens.
  // compute = DType::bf16 runs every matmul (linear layers, logits, attention tiles) by
  // kernels::gemm_bf16 (bf16 inputs, fp32 accumulation) and stores the matmul inputs that
  // are only ever read as bf16 (LayerNorm outputs, GELU output) in bf16; statistics,
  // residuals, logits, losses and all gradients stay fp32. A tensor-parallel model computes
  // the same way on its shard (its collectives stay fp32).
  // With `cp` (a context-parallel group of size C > 1, model/context/) the model keeps this
  // rank's chunks of each sequence: forward takes the whole (B, T) micro-batch, works on its
  // B x T/C rows (activations 1/C of one process's) and returns the loss summed over the
  // whole sequence (all cp ranks return the same value).
  // With `ep` (an expert-parallel group of size P > 1, which must outlive the model) the
  // model holds only its experts (ExpertShard {P, ep rank}) and dispatches tokens over ep.
  GPT(const GPTConfig& cfg, int max_batch, bool allocate_state = true, TensorComm* tp = nullptr,
      DType compute = DType::f32, ContextComm* cp = nullptr, comm::ProcessGroup* ep = nullptr);
  ~GPT() override;
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;

  // tokens, targets: (B, T) int32 in [0, vocab); weights: (B, T) per-token loss weight
  // (0 for padding), nullptr = all ones. Returns sum over tokens of weight * cross-entropy
  // (a sum, not a mean: the caller divides by the global token count). ids: who the B rows
  // are (every tp and cp rank of a group gets the same, as it gets the same tokens).
  // doc_start (B, T): documents packed into the sequences (model/chunk.h MicroInput), or
  // nullptr; checked (non-decreasing per row, at most the position, starting at 0).
  double forward(const int32_t* tokens, const int32_t* targets, const float* weights, int B, int T,
                 SampleIds ids = {}, const int32_t* doc_start = nullptr);
  // Gradient of scale * (the sum returned by the last forward), accumulated (+=) into the
  // gradients. For a mean over the global batch use scale = 1 / global weighted tokens.
  void backward(float scale);
  // Logits (B, T, padded_vocab) of the last forward (tokens = nullptr; valid until the next
  // forward or backward, which turns them into their gradient in place; one process only),
  // or computes them for tokens without targets (runs the forward hooks; under tensor
  // parallelism a collective of the tp group that gathers the vocabulary shards).
  const float* logits(const int32_t* tokens, int B, int T);
  // Custom heads (gpt_heads.cc; one process, fp32 compute): a loss computed outside the
  // model, from its logits (policy gradients) or from the final LayerNorm's output (value
  // and reward heads). hidden() runs the trunk for tokens (B, T) with the hook sequence of
  // logits() (unit 0's second pair without work) and returns ln_f's output (B, T, C), valid
  // until the next forward, logits or hidden call.
  const float* hidden(const int32_t* tokens, int B, int T);
  // Gradient, accumulated (+=), of a loss with d loss / d logits = dlogits (B, T,
  // padded_vocab) for the logits of the last logits(tokens, B, T) or forward call.
  void backward_logits(const float* dlogits);
  // The same from d loss / d hidden = dhidden (B, T, C) for the last hidden() call.
  void backward_hidden(const float* dhidden);
  int max_batch() const { return max_batch_; }

  // Expert parallelism: this rank computes the experts of its place in `ep` (which must
  // outlive the model); every rank of ep must run every forward and backward together.
  // The model must have been built for that group (the constructor's `ep`): a group of
  // another size is refused.
  void set_expert_group(comm::ProcessGroup* ep);
  // Bytes of the activation buffers allocated for (max_batch, seq) and the inputs' copy
  // (cost/activations.h predicts them under tensor parallelism).
  int64_t activation_bytes() const override;

  struct Impl;  // the one-process state between calls (gpt_impl.h)

 private:
  int max_batch_ = 0;
  Impl* impl_ = nullptr;
};

}  // namespace strata::model
