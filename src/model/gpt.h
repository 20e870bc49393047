// GPT-2 style decoder: pre-LayerNorm blocks, GELU MLP, tied input/output embedding.
//
// Parameters live in one flat buffer and gradients in another (llm.c), described by a table
// of named views. The flat buffer is laid out in *units*, each a contiguous range:
//   unit 0        embeddings: wte (Vp, C), wpe (maxT, C)
//   units 1..L    transformer block l-1: ln1 w/b, qkv w (3C, C)/b, attn proj w (C, C)/b,
//                 ln2 w/b, fc w (4C, C)/b, fc proj w (C, 4C)/b
//   unit L+1      final LayerNorm w/b
//   units L+2 ..  one per MoE block m (model/expert/moe.h), in block order: the experts this
//                 rank holds (all E, or E/P under expert parallelism), 4 views each; the
//                 block's router stays in the block's unit
// So the flat space is [dense units 0 .. L+1 | expert units]: the data-parallel engine
// reduces and shards the two regions over different groups (parallel/data_parallel.h).
// Under tensor parallelism (model/shard.h) the units hold the same views with this rank's
// local shapes, in the same order.
// Data-parallel and ZeRO engines work on units: they can rebind where a unit's parameters
// and gradients live (bind_unit) and are told, through hooks, when each unit is about to be
// used and when its gradients are final.
//
// Order of unit use in one micro-batch:
//   forward:  0 (embed), 1 .. L, L+1, 0 (logits via tied wte)
//   backward: 0 (logits), L+1, L .. 1, 0 (embed)   -> unit 0's gradients are final last.
// An MoE block l with expert unit x nests x inside its own unit: before(l+1) before(x) ...
// after(x) after(l+1), in forward and in backward.
// Exact hook sequence (F = Pass::forward, B = Pass::backward):
//   forward:  before(0,F) embed after(0,F); before(l,F) block after(l,F) for l = 1..L;
//             before(L+1,F) ln_f after(L+1,F); before(0,F) logits+loss after(0,F)
//   backward: before(0,B) logits backward; before(L+1,B) after(L+1,B);
//             before(l,B) after(l,B) for l = L..1; embedding backward after(0,B)
// so in backward unit 0 has one before (its parameters are needed from the start) and one
// after (its gradients are complete only at the very end). logits() uses the forward
// sequence. B = 0 runs the same hook sequence with no compute (ranks without samples still
// take part in collectives).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/memory.h"
#include "core/tensor.h"
#include "core/tensor_layout.h"
#include "model/expert/config.h"

namespace strata::comm {
class ProcessGroup;
}
namespace strata::model::expert {
class MoE;
}

namespace strata::model {

class TensorComm;  // model/tensor/collectives.h
class ContextComm;  // model/context/context_comm.h

struct GPTConfig {
  int layers = 4;
  int dim = 256;
  int heads = 4;
  int seq = 256;           // maximum sequence length (wpe rows)
  int vocab = 256;         // real vocabulary
  int padded_vocab = 256;  // rows of wte; a multiple of 64 (50257 -> 50304)
  expert::MoEConfig moe;   // Mixture-of-Experts blocks (model/expert/config.h); off by default

  // "tiny", "small", "gpt2"; throws naming the known presets otherwise.
  static GPTConfig preset(const std::string& name);
  // Throws a one-line Error for impossible configs (dim % heads, sizes <= 0, ...).
  void validate() const;
  int64_t num_params() const;  // elements of the flat parameter buffer
};

struct ParamView {
  std::string name;  // e.g. "wte", "h.0.attn.c_attn.weight" (docs/model.md)
  Shape shape;       // this rank's shape (the global one without tensor parallelism)
  int64_t offset;    // element offset in the flat buffer
  int unit;          // which unit it belongs to
  bool decay;        // AdamW weight decay applies (matrices and embeddings)
  bool replicated = false;  // every tensor-parallel rank holds the whole tensor (norms, wpe,
                            // row-parallel biases); false without tensor parallelism
};

// This rank's place in a tensor-parallel group (model/shard.h): size 1 = the whole model.
struct TpShard {
  int size = 1, rank = 0;
};

// This rank's place in an expert-parallel group of P ranks: rank q holds the experts
// [q·E/P, (q+1)·E/P) of every MoE block (size 1 = every expert).
struct ExpertShard {
  int size = 1, rank = 0;
};

// Builds the table of named views in unit order (the layout of the flat buffers) of the
// whole model, or of a tensor-parallel or expert-parallel rank's part of it (model/shard.h).
std::vector<ParamView> build_param_table(const GPTConfig& cfg, TpShard shard = {},
                                         ExpertShard experts = {});

// Pieces of [begin, end) that share one decay policy, in order, for optimizers that work
// on a range (a shard) of the flat buffers.
struct DecayRange {
  int64_t begin, end;
  bool decay;
};
std::vector<DecayRange> decay_ranges(const std::vector<ParamView>& table, int64_t begin,
                                     int64_t end);

// Where the flat buffers of a single-process (tp = 1) model lie in the global tensors: one
// primary piece per view of build_param_table, the whole tensor, at the view's offset.
TensorLayout tensor_layout(const GPTConfig& cfg);

enum class Pass : uint8_t { forward, backward };

// Who the rows of a training micro-batch are: the data loader's sample id of each row
// (data::MicroBatch::sample_ids, -1 for a padding row) and the epoch. What must not depend
// on the layout or on a restart is keyed by them: the MoE router's jitter noise
// (docs/moe.md). sample = null: unknown (each forward then draws fresh noise).
struct SampleIds {
  const int64_t* sample = nullptr;  // (B)
  int64_t epoch = 0;
};

struct UnitHooks {
  // Called before a unit's parameters are read (bind_unit may be called from here).
  std::function<void(int unit, Pass pass)> before_unit;
  // Called after a unit's work in a pass; for Pass::backward its gradients are then
  // complete for this micro-batch (unit 0 only after the final embedding backward).
  std::function<void(int unit, Pass pass)> after_unit;
};

// What the data-parallel/ZeRO engine (parallel/data_parallel.h) needs of a model part: its
// units, numbered 0 .. num_units() - 1 in the order of its flat buffers, their ranges, the
// rebinding of a unit's memory, the hooks around each unit's use, its table of views and
// their global placement, and its initialisation. model::GPT is one (its units are the global
// ones); a pipeline stage (model/stage.h) another (its held units, in unit order).
class ModelPart {
 public:
  virtual ~ModelPart() = default;
  virtual int num_units() const = 0;
  // Units [first_expert_unit(), num_units()) hold experts (num_units() when none).
  virtual int first_expert_unit() const = 0;
  // Unit 0 is the embedding, tied with the output layer, so it is used at both ends of a pass
  // (false for a part without the embedding: a middle pipeline stage).
  virtual bool tied_unit0() const = 0;
  // Units where a chunk of the part starts (besides 0): a gradient bucket never spans one,
  // since a chunk's backward for one micro-batch may be far from the next chunk's.
  virtual std::vector<int> chunk_starts() const { return {}; }
  virtual std::pair<int64_t, int64_t> unit_range(int unit) const = 0;
  virtual int64_t num_params() const = 0;
  virtual const std::vector<ParamView>& param_table() const = 0;
  virtual TensorLayout tensor_layout() const = 0;
  virtual ExpertShard expert_shard() const = 0;
  virtual TensorComm* tensor_comm() const = 0;
  virtual float* params() = 0;  // owned flat buffers, or null when the caller binds every unit
  virtual float* grads() = 0;
  virtual void bind_unit(int unit, float* params, float* grads) = 0;
  virtual void set_hooks(UnitHooks hooks) = 0;
  virtual void init(uint64_t seed) = 0;
};

class GPT final : public ModelPart {
 public:
  // Allocates parameters, gradients and activations for micro-batches up to
  // (max_batch, cfg.seq) and counts them in the memory tracker. With allocate_state = false
  // the flat parameter and gradient buffers are not allocated: the caller binds every unit
  // (ZeRO-3 keeps only shards).
  // With `tp` (a tensor-parallel group of size T > 1, which must outlive the model) the
  // model is this rank's shard (model/shard.h) and its forward and backward communicate
  // over tp (model/gpt_tp.cc); every tp rank must then get the same tokens.
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
  DType compute() const { return compute_; }

  const GPTConfig& config() const { return cfg_; }
  int num_units() const override { return cfg_.layers + 2 + cfg_.moe.moe_layers(cfg_.layers); }
  // Units [first_expert_unit(), num_units()) hold experts (none in a dense model).
  int first_expert_unit() const override { return cfg_.layers + 2; }
  bool tied_unit0() const override { return true; }
  ExpertShard expert_shard() const override { return experts_; }
  int64_t num_params() const override { return num_params_; }
  const std::vector<ParamView>& param_table() const override { return table_; }
  TpShard shard() const { return shard_; }
  TensorComm* tensor_comm() const override { return tp_; }
  ContextComm* context_comm() const { return cp_; }
  // Every piece of the flat buffer in global GPT-2 coordinates (core/tensor_layout.h).
  TensorLayout tensor_layout() const override;
  // [begin, end) element range of a unit in the flat buffers.
  std::pair<int64_t, int64_t> unit_range(int unit) const override;

  float* params() override { return params_.as<float>(); }  // flat (num_params), owned
  float* grads() override { return grads_.as<float>(); }    // flat (num_params), owned

  // GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), LN w=1,
  // biases 0, wte rows past the real vocabulary 0. Each view draws from
  // Rng(seed, stream = its index in the table), so values do not depend on the layout.
  void init(uint64_t seed) override;

  // Sets every bound unit's gradients to zero.
  void zero_grads();

  void set_hooks(UnitHooks hooks) override;
  // Points unit u's parameters and gradients at other memory (unit_range(u) elements each).
  void bind_unit(int unit, float* params, float* grads) override;

  // tokens, targets: (B, T) int32 in [0, vocab); weights: (B, T) per-token loss weight
  // (0 for padding), nullptr = all ones. Returns sum over tokens of weight * cross-entropy
  // (a sum, not a mean: the caller divides by the global token count). ids: who the B rows
  // are (every tp and cp rank of a group gets the same, as it gets the same tokens).
  double forward(const int32_t* tokens, const int32_t* targets, const float* weights, int B, int T,
                 SampleIds ids = {});
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

  // Mixture of Experts (model/expert/moe.h); null for a dense model.
  expert::MoE* moe() const;
  // Expert parallelism: this rank computes the experts of its place in `ep` (which must
  // outlive the model); every rank of ep must run every forward and backward together.
  // The model must have been built for that group (the constructor's `ep`): a group of
  // another size is refused.
  void set_expert_group(comm::ProcessGroup* ep);
  // Bytes of the activation buffers allocated for (max_batch, seq) (cost/activations.h predicts
  // them under tensor parallelism).
  int64_t activation_bytes() const;

 private:
  GPTConfig cfg_;
  TensorComm* tp_ = nullptr;
  ContextComm* cp_ = nullptr;
  TpShard shard_;
  ExpertShard experts_;
  int max_batch_ = 0;
  DType compute_ = DType::f32;
  int64_t num_params_ = 0;
  std::vector<ParamView> table_;
  Buffer params_, grads_;

 public:
  struct Impl;  // activations and per-unit bindings (defined in gpt.cc)

 private:
  Impl* impl_ = nullptr;

 public:
  ~GPT() override;
  GPT(const GPT&) = delete;
  GPT& operator=(const GPT&) = delete;
};

}  // namespace strata::model
