// The MoE blocks of one GPT: routing (router.h), dispatch to the experts' owners and back
// (dispatch.h), expert MLPs (experts.h), and the load statistics of a training step.
//
// One MoE block, N tokens of a group, x (N, C) the ln_2 output:
//   forward:  logits = x' W_r^T (x' = x, times U(1-j, 1+j) noise when jittering in
//             training, keyed by the tokens' identity: TokenIds below); route; send x
//             rows of kept assignments to the experts' owners; experts; send outputs
//             back; out[t] += sum over kept k of g[t][k] · O(t, k)
//   backward: dO(t, k) = g[t][k] · dout[t] and dg[t][k] = <dout[t], O(t, k)> go to the
//             owners; experts backward; dX rows come back and add into dx; the router's
//             gradient (gates, aux and z terms) adds dlogits W_r into dx.
// Shared experts (MoEConfig::shared_experts): out[t] += S(x[t]), one MLP of Hs hidden units
// every token passes through on the rank that holds it (no dispatch), split over tp like the
// routed experts; its backward adds its dx rows.
// Parameters of a block: mlp.router.weight (E, C) in the block's unit (after ln_2), then the
// shared experts' mlp.shared_experts.c_fc.weight (Hs, C), .c_fc.bias, .c_proj.weight (C, Hs),
// .c_proj.bias (C) (Llama: gate_proj, up_proj, down_proj), replicated over ep like the router;
// in the block's expert unit (model/gpt.h), for each expert e this rank holds:
// mlp.experts.e.c_fc.weight (H, C), .c_fc.bias (H), .c_proj.weight (C, H), .c_proj.bias
// (C), H = MoEConfig::expert_width (4C, or Llama's --ffn, unless fine-grained). Under expert parallelism a rank holds, computes and accumulates gradients for its own
// experts only (MoEWeights has all E slots; the others are empty), and the data-parallel
// engine reduces them over the ranks holding the same experts (parallel/region.h).
// Under tensor parallelism (set_tensor; docs/moe.md) every tp rank holds the router whole
// and F = 4C/T hidden units of each of its experts. Its caller hands it the whole (N, C)
// input (gathered under sequence parallelism), so all tp ranks route alike; each runs its
// slice of the experts and `out` receives its partial sum over its F units, which the caller
// sums over tp (reduce-scatter under SP, else all-reduce), as after the dense MLP's c_proj. In
// backward `dout` is the whole (N, C) gradient; the gates' gradients <dout, O> are partial
// per rank and all-reduced over tp (N·K floats) before the router's backward; dx is this
// rank's partial sum (the router's term added on tp rank 0 only), for the caller to sum.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/memory.h"
#include "model/expert/config.h"
#include "model/expert/dispatch.h"
#include "model/expert/experts.h"
#include "model/expert/router.h"

namespace strata::model {
class TensorComm;
}

namespace strata::model::expert {

// Floats counted as activations by the memory tracker, grown on demand (the contents are
// not kept across growth): the MoE buffers depend on the routing (rows per expert).
class GrowBuf {
 public:
  float* need(int64_t n) {
    if (int64_t(buf_.bytes()) < n * int64_t(sizeof(float)))
      buf_ = Buffer(MemCategory::activations, size_t(n) * sizeof(float));
    return data();
  }
  float* data() const { return buf_.as<float>(); }

 private:
  Buffer buf_;
};

// Pointers to one MoE block's router and its experts' views (all E, global ids; the experts
// this rank does not hold are empty).
struct MoEWeights {
  float* router = nullptr;  // (E, C)
  std::vector<ExpertViews> experts;
  ExpertViews shared{};  // the shared experts as one MLP (fcw null: none)
};

// Load of one step, summed over its micro-batches (and, once the trainer has reduced
// them, over the ranks): per MoE block, `wanted` and `kept` assignments per expert, then
// dropped, tokens, entropy sum, aux and z sums. Flat, so one all-reduce carries it.
struct LoadStats {
  int layers = 0, E = 0;
  std::vector<double> v;  // layers x (2E + 5)
  static constexpr int kExtra = 5;
  double* layer(int m) { return v.data() + size_t(m) * (2 * E + kExtra); }
  const double* layer(int m) const { return v.data() + size_t(m) * (2 * E + kExtra); }
  double aux() const, z() const;
};

// Who the N = B·T rows of one forward are, so that the router's jitter noise is a function
// of the data and not of the layout or of how many forwards a process ran (docs/moe.md):
// row b·T + t is local row t of batch item b, which is the data loader's sample sample[b]
// in epoch `epoch`, at global position position[t] of its sequence (t when position is
// null: the whole sequence is here; under context parallelism a rank holds chunks of it).
struct TokenIds {
  const int64_t* sample = nullptr;  // (B): sample ids, -1 for a padding row
  const int* position = nullptr;    // (T) or null
  int B = 0, T = 0;
  int64_t epoch = 0;
};

class MoE {
 public:
  // slots: forwards of one block that may be in flight before their backward (a pipeline
  // stage's activation slots, model/stage.h); each keeps its own routing state.
  // hidden: the dense MLP's width (0: 4C), each routed expert's unless cfg.expert_ffn says
  // otherwise; gated: SwiGLU experts (Llama blocks, model/expert/experts.h).
  MoE(const MoEConfig& cfg, int layers, int C, int slots = 1, int hidden = 0, bool gated = false);
  ~MoE();
  const MoEConfig& config() const { return cfg_; }
  // Expert parallelism over `group` (null: every expert local). Throws naming --ep when E
  // does not divide.
  void set_group(comm::ProcessGroup* group);
  const ExpertGroup& group() const { return *group_; }
  // Tensor parallelism over `tc` (null or one rank: whole experts); see above.
  void set_tensor(TensorComm* tc);
  // Context parallelism over `group` (null or one rank: none): each rank holds chunks of every
  // sequence, and the routing group is still the whole micro-batch (router.h, RouteGroup).
  void set_context(comm::ProcessGroup* group);
  void set_seed(uint64_t seed) { seed_ = seed; }
  void set_training(bool training) { training_ = training; }  // router jitter on or off
  bool training() const { return training_; }

  // One MoE block (moe index m): x (N, C) fp32 or xh bf16 (one of them null); out (N, C) +=.
  // N may be 0: the rank still takes part in the exchanges. ids (B·T = N) key the jitter
  // noise of element (t, c) by (seed, m, epoch, sample, position, c); without them (a caller
  // that knows no sample identity, such as the block's own tests) the rows are anonymous and
  // each training forward draws fresh noise from a per-process count of forwards.
  // slot: which of the block's in-flight forwards this is (its backward names the same).
  // seq_rows: the local rows of each sequence (sequence-wise balance; 0: one sequence).
  void forward(int m, const float* x, const uint16_t* xh, float* out, int64_t N,
               const MoEWeights& w, bool bf16, const TokenIds* ids = nullptr, int slot = 0,
               int64_t seq_rows = 0);
  // dout (N, C); dx (N, C) written (the gradient of the block's input x); scale multiplies
  // the aux and z losses' gradient (the same scale as the cross-entropy's).
  void backward(int m, const float* dout, float* dx, const MoEWeights& w, const MoEWeights& g,
                bool bf16, float scale, int slot = 0);

  // aux and z sums of the last forward over every block (coefficients included).
  double last_aux() const { return last_aux_; }
  double last_z() const { return last_z_; }
  // The statistics since the last take (and resets them).
  LoadStats take_load();
  // The aux and z losses (coefficients included) of every forward since the last take: a
  // pipeline stage's share of a step's loss, whatever order its micro-batches ran in.
  double load_aux_z() const { return load_.aux() + load_.z(); }
  // The balancing bias of every block (MoE blocks x E, zeros at first; MoEConfig::bias_rate),
  // set back from a checkpoint, and moved by a step's load summed over every rank: the same
  // sums give every rank the same bias, so every rank routes alike.
  const std::vector<float>& router_bias() const { return bias_; }
  void set_router_bias(const std::vector<float>& bias);
  void update_router_bias(const LoadStats& global);
  // Rows this rank's experts processed in forward since the last take (and resets it): the
  // expert-parallel load of this rank, which the straggler check compares across ranks.
  int64_t take_owned_rows() { return std::exchange(owned_rows_, 0); }

 private:
  struct Layer;
  MoEConfig cfg_;
  int C_, F_;                  // width; hidden units of each expert held here (hidden/T)
  int hidden_;                 // each expert's whole MLP width
  int shared_, Fs_;            // the shared experts' whole width, and held here (shared/T)
  bool gated_;
  TensorComm* tp_ = nullptr;  // tensor-parallel group, or null
  comm::ProcessGroup* cp_ = nullptr;  // context-parallel group, or null
  int slots_ = 1;
  std::vector<std::unique_ptr<Layer>> layers_;  // block m, slot s: m * slots_ + s
  std::unique_ptr<ExpertGroup> group_;
  uint64_t seed_ = 0, counter_ = 0;  // counter_: forwards of anonymous rows so far
  bool training_ = true;
  double last_aux_ = 0, last_z_ = 0;
  int last_m_ = -1;
  int64_t owned_rows_ = 0;
  LoadStats load_;
  std::vector<float> bias_;  // (MoE blocks, E)
  GrowBuf scratch_[8];  // rows sent, rows received, dA (forward: Y), dX (forward: rows back), dH
                        // (gated), dO, Z, Z back

  // The source's rows to their owners and, as an owner, the received rows into L.X.
  void dispatch(int m, Layer& L, const float* xin, int C);
  void source_rows(Layer& L, int P, int El);
  const float* router_input(int m, Layer& L, const float* x, const uint16_t* xh, const TokenIds* ids);
  void record_load(int m, const Routing& r);
  const float* owner_backward(int m, const Layer& L, const float* d, const MoEWeights& w, const MoEWeights& gw,
                              bool bf16, float* dg);
  void router_backward(const Layer& L, const std::vector<float>& dgate, float* dx, const MoEWeights& w,
                       const MoEWeights& gw, float scale);

  Layer& layer(int m, int slot);  // block m's routing state for activation slot `slot`
  // noise (N, C) of block m's router input for rows `ids` (null: anonymous rows).
  void draw_noise(int m, float* noise, int64_t N, const TokenIds* ids);
};

}  // namespace strata::model::expert
