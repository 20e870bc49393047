// Internals of model::GPT shared by its one-process forward/backward (gpt.cc) and its
// tensor-parallel forward/backward (gpt_tp.cc): activations, unit bindings, view pointers.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "core/trace.h"
#include "kernels/layernorm.h"
#include "model/gpt.h"

namespace strata::model {

inline constexpr int kViewsPerLayer = 12;

// Pointers to one block's twelve views (parameters or gradients), in table order.
struct Block {
  float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};

// One block's activations. Under tensor parallelism with T ranks, rows of the residual
// region (ln1, res2, ln2, res3 and norm statistics) are the local rows n, and the
// column-parallel outputs (qkv, atty, fch, fch_gelu, att_lse) have 1/T of the columns.
struct LayerActs {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att_lse, *res2, *ln2, *ln2_mean, *ln2_rstd, *fch,
      *fch_gelu, *res3;
  uint16_t *ln1_h = nullptr, *ln2_h = nullptr, *gelu_h = nullptr;  // bf16 compute: instead of
                                                                   // ln1, ln2, fch_gelu
};

// Hands out consecutive pieces of one buffer.
struct Carver {
  float* base;
  int64_t used = 0;
  float* take(int64_t n) {
    float* p = base ? base + used : nullptr;
    used += (n + 15) / 16 * 16;  // keep every piece 64-byte aligned
    return p;
  }
  // n bf16 values, or none (nullptr) when `want` is false.
  uint16_t* take_bf16(int64_t n, bool want) {
    return want ? reinterpret_cast<uint16_t*>(take((n + 1) / 2)) : nullptr;
  }
  // n floats, or none (nullptr) when `want` is false.
  float* take_if(int64_t n, bool want) { return want ? take(n) : nullptr; }
};

// A "compute" trace span for one unit's work, built only when tracing is on.
class UnitSpan {
 public:
  UnitSpan(const char* pass, const char* what, int layer = -1) {
    if (!tracer().enabled()) return;
    std::string name = std::string(pass) + " " + what;
    if (layer >= 0) name += std::to_string(layer);
    span_.emplace(tracer(), std::move(name), "compute");
  }

 private:
  std::optional<TraceSpan> span_;
};

// Activation sizes: N rows of a whole micro-batch, n of them held in the residual region,
// 1/T of the columns of the column-parallel layers, Vr local vocabulary columns.
struct ActShape {
  int64_t N = 0, n = 0;
  int T = 1;
  int64_t Vr = 0;
  int64_t rep = 0;  // floats of the replicated-gradient scratch (tensor parallel only)
};

// One block's activations (LayerActs) for a micro-batch of a.N rows.
inline void carve_layer(Carver& c, LayerActs& l, const GPTConfig& cfg, const ActShape& a,
                        bool bf16) {
  const int64_t C = cfg.dim, N = a.N, n = a.n, Cl = C / a.T;
  const bool f32 = !bf16;
  l.ln1 = c.take_if(n * C, f32);
  l.ln1_h = c.take_bf16(n * C, bf16);
  l.ln1_mean = c.take(n);
  l.ln1_rstd = c.take(n);
  l.qkv = c.take(3 * N * Cl);
  l.atty = c.take(N * Cl);
  l.att_lse = c.take(N * cfg.heads / a.T);
  l.res2 = c.take(n * C);
  l.ln2 = c.take_if(n * C, f32);
  l.ln2_h = c.take_bf16(n * C, bf16);
  l.ln2_mean = c.take(n);
  l.ln2_rstd = c.take(n);
  l.fch = c.take(4 * N * Cl);
  l.fch_gelu = c.take_if(4 * N * Cl, f32);
  l.gelu_h = c.take_bf16(4 * N * Cl, bf16);
  l.res3 = c.take(n * C);
}

struct GPT::Impl {
  std::vector<float*> unit_params, unit_grads;
  std::vector<int64_t> view_rel;  // offset of each view inside its unit
  UnitHooks hooks;

  Buffer acts_buf, input_buf;
  float *encoded = nullptr, *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;
  uint16_t* lnf_h = nullptr;  // bf16 compute: instead of lnf
  bool bf16 = false;          // bf16 compute (one process and tensor parallel alike)
  float *logits = nullptr, *losses = nullptr, *ce_lse = nullptr;
  float *dres = nullptr, *dbuf_c = nullptr, *dbuf_4c = nullptr, *dqkv = nullptr;
  // Tensor parallel only: two (N, C) scratch tensors (gathered inputs, partial sums), the
  // replicated parameters' gradients of one unit before their tp reduction, CE statistics.
  float *full_a = nullptr, *full_b = nullptr, *rep_grads = nullptr, *ce_stats = nullptr;
  Buffer logits_full;  // tensor parallel logits() gathered over the vocabulary, on demand
  std::vector<LayerActs> layers;
  int32_t *tokens = nullptr, *targets = nullptr;
  float* weights = nullptr;
  bool has_weights = false;

  int B = 0, T = 0;
  bool forward_done = false;  // a forward with targets ran and backward may follow
  bool logits_valid = false;

  // Layout pass with base = nullptr counts the floats; the second pass assigns pointers.
  int64_t carve(float* base, const GPTConfig& cfg, const ActShape& a) {
    Carver c{base};
    const int64_t C = cfg.dim, N = a.N, n = a.n, Cl = C / a.T;
    const bool f32 = !bf16;
    encoded = c.take(n * C);
    layers.resize(cfg.layers);
    for (LayerActs& l : layers) carve_layer(c, l, cfg, a, bf16);
    lnf = c.take_if(n * C, f32);
    lnf_h = c.take_bf16(n * C, bf16);
    lnf_mean = c.take(n);
    lnf_rstd = c.take(n);
    logits = c.take(N * a.Vr);
    losses = c.take(N);
    ce_lse = c.take(N);
    dres = c.take(n * C);
    dbuf_c = c.take(n * C);
    dbuf_4c = c.take(4 * N * Cl);
    dqkv = c.take(3 * N * Cl);
    if (a.T > 1) {
      full_a = c.take(N * C);
      full_b = c.take(N * C);
      rep_grads = c.take(a.rep);
      ce_stats = c.take(2 * N);
    }
    return c.used;
  }

  void before(int unit, Pass p) {
    if (hooks.before_unit) hooks.before_unit(unit, p);
  }
  void after(int unit, Pass p) {
    if (hooks.after_unit) hooks.after_unit(unit, p);
  }
};

inline Block block_views(float* base, const std::vector<int64_t>& rel, int layer) {
  STRATA_CHECK(base, "unit ", layer + 1, " has no memory bound");
  const int64_t* r = rel.data() + 2 + kViewsPerLayer * layer;
  return Block{base + r[0], base + r[1], base + r[2], base + r[3], base + r[4],  base + r[5],
               base + r[6], base + r[7], base + r[8], base + r[9], base + r[10], base + r[11]};
}

// LayerNorm output into whichever of the fp32 (f) or bf16 (h) buffers exists.
inline void layernorm_out(float* f, uint16_t* h, float* mean, float* rstd, const float* x,
                          const float* w, const float* b, int64_t N, int C) {
  if (h)
    kernels::layernorm_forward(h, mean, rstd, x, w, b, N, C);
  else
    kernels::layernorm_forward(f, mean, rstd, x, w, b, N, C);
}

inline float* checked(float* p, int unit, const char* what) {
  STRATA_CHECK(p, "unit ", unit, " has no ", what, " memory bound");
  return p;
}

// One block of the one-process model (gpt.cc), also run by a pipeline stage (model/stage.h):
// x (B·T, C) -> a.res3; backward: dres holds d loss / d res3 on entry, d loss / d x on exit.
void block_forward(const GPTConfig& cfg, const Block& w, LayerActs& a, const float* x, int B, int T);
void block_backward(const GPTConfig& cfg, const Block& w, const Block& g, const LayerActs& a,
                    const float* x, float* dres, float* dbuf_c, float* dbuf_4c, float* dqkv, int B,
                    int T);

// Tensor-parallel forward, backward and logits (gpt_tp.cc).
double tp_forward(GPT::Impl& im, const GPTConfig& cfg, TensorComm& tc, TpShard s);
void tp_backward(GPT::Impl& im, const GPTConfig& cfg, TensorComm& tc, TpShard s, float scale);
const float* tp_logits(GPT::Impl& im, const GPTConfig& cfg, TensorComm& tc, TpShard s);

}  // namespace strata::model
