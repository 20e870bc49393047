// The model's configuration, its table of parameter views and units, and the interface the
// data-parallel/ZeRO engine sees of a model part (ModelPart): what model::GPT (gpt.h) and a
// pipeline stage (stage.h), which is the same class with its chunks, share.
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
// after (its gradients are complete only at the very end). An untied output layer (Llama's
// lm_head, GPTConfig::tied() false) lives in unit L+1 with the final norm: the logits run
// inside L+1's pair (forward: before(L+1,F) ln_f logits+loss after(L+1,F); backward:
// before(L+1,B) logits ln_f after(L+1,B)), and unit 0 is used only by the embedding, once
// each way (tied_unit0() false). logits() uses the forward
// sequence. B = 0 runs the same hook sequence with no compute (ranks without samples still
// take part in collectives).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/tensor.h"
#include "core/tensor_layout.h"
#include "cost/shapes.h"
#include "kernels/rope.h"
#include "model/expert/config.h"
#include "model/presets.h"
#include "nlohmann/json_fwd.hpp"

namespace strata::comm {
class ProcessGroup;
}
namespace strata::model::expert {
class MoE;
}

namespace strata::model {

class TensorComm;  // model/tensor/collectives.h
class ContextComm;  // model/context/context_comm.h

// Activation recomputation (docs/recompute.md), a policy of the trunk: which of a block's
// activations its forward keeps for the backward and which the backward recomputes.
//   none       every activation kept
//   selective  the block drops its two LayerNorm outputs and (fp32 compute) its GELU output,
//              the backward recomputes them from what it keeps (the block input, res2, the
//              norms' statistics, the GELU input): elementwise work
//   full       a block keeps only its output (the next block's input); its backward runs the
//              forward again first. `layers` > 0: only the first `layers` blocks of every chunk
//              (Megatron's block method); MoE blocks always keep everything (see docs);
//              bf16_inputs: the outputs kept for a next recomputed block in bf16
using Recompute = cost::Recompute;  // cost/shapes.h: one enum for the engine and the planner
struct RecomputePolicy {
  Recompute mode = Recompute::none;
  int layers = 0;  // full: blocks per chunk recomputed, 0 = all
  // full under bf16 compute (--recompute-inputs bf16): a recomputed block followed by another
  // of its chunk keeps its output (the next block's input) in bf16, and the forward goes on
  // from the rounded value, so both passes of the next block read the same input
  bool bf16_inputs = false;
};
// "none" | "selective" | "full" (cost::recompute_from_name); else throws naming --recompute.
inline Recompute parse_recompute_mode(const std::string& s) {
  const std::optional<Recompute> r = cost::recompute_from_name(s);
  if (!r) fail_setting(setting("recompute"), " ", s, ": must be none, selective or full");
  return *r;
}
struct GPTConfig;
// --rope-scaling: "none", "FACTOR" or "FACTOR,LOW,HIGH,ORIGINAL" (Llama 3.1's llama3 scaling;
// LOW 1, HIGH 4, ORIGINAL 8192 by default) into c's rope_* fields; one line otherwise.
void parse_rope_scaling(const std::string& s, GPTConfig& c);
bool parse_recompute_inputs(const std::string& s);      // "fp32" (false) | "bf16" (true)

// The block's architecture (model/block.h):
//   gpt2   LayerNorm, learned positions (wpe), biases, GELU MLP of 4C, tied embeddings
//   llama  RMSNorm (norm_eps), rotary positions (rope_theta, Hugging Face's rotate_half
//          layout), no biases, SwiGLU MLP of `ffn`, grouped-query attention (kv_heads), an
//          output layer of its own (lm_head) unless tie_embeddings
enum class Arch : uint8_t { gpt2, llama };
Arch parse_arch(const std::string& s);  // "gpt2" | "llama"
const char* arch_name(Arch a);

struct GPTConfig {
  Arch arch = Arch::gpt2;
  int layers = 4;
  int dim = 256;
  int heads = 4;
  int kv_heads = 0;        // key/value heads (grouped-query attention); 0: heads
  int ffn = 0;             // MLP hidden width; 0: 4·dim (gpt2), llama_ffn(dim) (llama)
  int seq = 256;           // maximum sequence length (wpe rows)
  int vocab = 256;         // real vocabulary
  int padded_vocab = 256;  // rows of wte; a multiple of 64 (50257 -> 50304)
  float norm_eps = 1e-5f;  // RMSNorm's (llama; GPT-2's LayerNorm uses 1e-5)
  float rope_theta = 10000.0f;
  bool tie_embeddings = true;  // llama: the output layer is the input embedding
  expert::MoEConfig moe;   // Mixture-of-Experts blocks (model/expert/config.h); off by default
  RecomputePolicy recompute;
  // llama: Llama 3.1's rope_scaling "llama3" (kernels/rope.h); rope_factor 0: none.
  float rope_factor = 0.0f, rope_low_freq_factor = 1.0f, rope_high_freq_factor = 4.0f;
  float rope_original_max_pos = 8192.0f;

  bool llama() const { return arch == Arch::llama; }
  int kv() const { return kv_heads > 0 ? kv_heads : heads; }
  int head_dim() const { return dim / heads; }
  int hidden() const { return ffn > 0 ? ffn : int(cost::default_ffn(llama(), dim)); }
  // The output layer is wte (unit 0 at both ends of a pass); else lm_head in unit L+1.
  bool tied() const { return !llama() || tie_embeddings; }
  kernels::Rope rope() const;  // theta and scaling

  // Whether block l, the i-th of its chunk, keeps only its output (full recomputation).
  bool recomputes_block(int l, int i) const {
    return recompute.mode == Recompute::full && !moe.is_moe_layer(l) &&
           (recompute.layers == 0 || i < recompute.layers);
  }

  // The architecture keys beyond GPT-2's sizes, as run configs and model files record them:
  // {"arch": "llama", "kv_heads", "ffn", "norm_eps", "rope_theta", "rope_scaling",
  // "tie_embeddings"}, or an empty object for GPT-2; read_arch sets them from such an object
  // (absent: GPT-2; rope_scaling absent or null: none). rope_scaling is Hugging Face's object:
  // {"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
  // "original_max_position_embeddings"}.
  nlohmann::json arch_json() const;
  void read_arch(const nlohmann::json& j);

  // A model of the preset table (model/presets.h: "tiny", "small", "gpt2", "llama-tiny", ...,
  // the published shapes too); throws naming the known presets otherwise.
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
  bool replicated = false;  // other tensor-parallel ranks hold the same elements: every tp
                            // rank (norms, wpe, row-parallel biases) or the ranks sharing a
                            // key/value head (model/shard.h); false without tensor parallelism
  bool primary = true;      // this rank counts them (norm squares, checkpoint pieces): one
                            // rank of those holding a replicated view
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

}  // namespace strata::model
