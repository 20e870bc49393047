// KV-cache decoding (terms and cost in kv_cache.h).
#include "rlhf/kv_cache.h"

#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/kernels.h"
#include "model/tensor/linear.h"

namespace strata::rlhf {

namespace k = strata::kernels;

namespace tn = strata::model::tensor;

namespace {

// The products of at most this many rows take the row pass (a step's batch, a short prompt).
constexpr int64_t kFewRows = 32;

}  // namespace

// The views of a block in table order (model/shard.cc): GPT-2 ln1 w/b, qkv w/b, proj w/b,
// ln2 w/b, fc w/b, fc proj w/b after wte, wpe; Llama ln1, q, k, v, o, ln2, gate, up, down after
// embed_tokens (q|k|v and gate|up adjacent: one matrix each). Index of block `layer`'s view
// with the role of GPT-2's view i.
int KvDecoder::block_view(int layer, int i) const {
  // The global table: wte (and GPT-2's wpe) first, then 12 (GPT-2) or 9 (Llama) views a block.
  const int v = model::block_view_index(cfg_.llama(), i);
  return v < 0 ? -1 : (cfg_.llama() ? 1 + 9 * layer : 2 + 12 * layer) + v;
}

const float* KvDecoder::view(int index) const {
  return index < 0 ? nullptr : params_ + table_[size_t(index)].offset;
}

KvDecoder::KvDecoder(const model::GPTConfig& cfg, int max_batch)
    : cfg_(cfg), max_batch_(max_batch), table_(model::build_param_table(cfg)),
      arch_{cfg.llama(), cfg.dim, cfg.heads, cfg.kv(), cfg.hidden(), cfg.norm_eps, cfg.rope()} {
  cfg_.validate();
  STRATA_CHECK(max_batch >= 1, "KV cache: max batch must be >= 1 (got ", max_batch, ")");
  STRATA_CHECK(!cfg.moe.enabled(), "KV cache: Mixture-of-Experts blocks are not decoded");
  const int64_t C = cfg.dim, S = cfg.seq, L = cfg.layers, K = kv_width();
  const int64_t rows = int64_t(max_batch) * S, F = cfg.hidden();
  const int64_t qkv = C + 2 * K, fc = cfg.llama() ? 2 * F : F;
  cache_ = Buffer(MemCategory::activations, sizeof(float) * 2 * L * max_batch * S * K);
  k_ = cache_.as<float>();
  v_ = k_ + L * max_batch * S * K;
  const int64_t floats = rows * (C + C + qkv + C + fc + F + cfg.heads + 2) +
                         int64_t(max_batch) * (C + cfg.padded_vocab);
  scratch_ = Buffer(MemCategory::activations, sizeof(float) * floats);
  float* p = scratch_.as<float>();
  auto take = [&p](int64_t n) { float* r = p; p += n; return r; };
  x_ = take(rows * C);
  ln_ = take(rows * C);
  qkv_ = take(rows * qkv);
  att_ = take(rows * C);
  fc_ = take(rows * fc);
  gelu_ = take(rows * F);
  lse_ = take(rows * cfg.heads);
  mean_ = take(rows);
  rstd_ = take(rows);
  last_ = take(int64_t(max_batch) * C);
  logits_ = take(int64_t(max_batch) * cfg.padded_vocab);
  // The block's activations (model/block.h) over this scratch: both norms share ln_ and its
  // statistics, and the residual stream stays in x_ (res2 and res3 are x_ itself).
  acts_.ln1 = acts_.ln2 = ln_;
  acts_.ln1_mean = acts_.ln2_mean = mean_;
  acts_.ln1_rstd = acts_.ln2_rstd = rstd_;
  acts_.qkv = qkv_;
  acts_.atty = att_;
  acts_.att_lse = lse_;
  acts_.res2 = acts_.res3 = x_;
  acts_.fch = fc_;
  acts_.fch_gelu = gelu_;
}

int64_t KvDecoder::kv_width() const { return int64_t(cfg_.kv()) * cfg_.head_dim(); }

model::Block KvDecoder::weights(int l) const {
  // The block's passes take mutable views (they also serve gradients); its forward only reads.
  const int first = block_view(l, 0);
  return model::block_of(cfg_.llama(), [&](int v) { return const_cast<float*>(view(first + v)); });
}

model::TpDims KvDecoder::dims(int B, int T) const {
  model::TpDims d;
  d.B = B;
  d.T = T;
  d.N = d.n = int64_t(B) * T;
  d.C = d.Cl = cfg_.dim;
  d.NHl = cfg_.heads;
  d.NKVl = cfg_.kv();
  d.Fl = cfg_.hidden();
  d.m = arch_;
  d.Vr = cfg_.padded_vocab;
  return d;
}

const float* KvDecoder::head(const float* x) {
  const int C = cfg_.dim;
  const int lnf = block_view(cfg_.layers, 0);  // the view after the last block's
  const float* out = cfg_.tied() ? view(0) : view(lnf + 1);  // wte, or lm_head
  model::norm_out(arch_, ln_, nullptr, mean_, rstd_, x, view(lnf),
                  cfg_.llama() ? nullptr : view(lnf + 1), B_);
  tn::linear_forward(false, logits_, kernels::Mat(ln_, C), out, nullptr, B_, C, cfg_.padded_vocab,
                     /*accumulate=*/false, B_ <= kFewRows);
  return logits_;
}

const float* KvDecoder::prefill(const int32_t* tokens, int B, int P) {
  STRATA_CHECK(params_, "KV cache: no parameters bound");
  STRATA_CHECK(B >= 1 && B <= max_batch_, "KV cache: batch ", B, " outside [1, ", max_batch_, "]");
  STRATA_CHECK(P >= 1 && P <= cfg_.seq, "KV cache: prompt of ", P, " tokens outside [1, ",
               cfg_.seq, "] (the model's context)");
  for (int64_t i = 0; i < int64_t(B) * P; ++i)
    STRATA_CHECK(tokens[i] >= 0 && tokens[i] < cfg_.vocab, "KV cache: token ", tokens[i],
                 " at position ", i, " outside [0, ", cfg_.vocab, ")");
  B_ = B;
  pos_ = P;
  const int C = cfg_.dim, S = cfg_.seq;
  const int64_t N = int64_t(B) * P, KW = kv_width(), W = C + 2 * KW;
  k::encoder_forward(x_, tokens, view(0), cfg_.llama() ? nullptr : view(1), B, P, C);
  std::vector<int32_t> pos(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) pos[size_t(i)] = int32_t(i % P);
  const model::TpDims d = dims(B, P);
  const model::BlockCtx ctx{one_, d, nothing_, nullptr, 0, nullptr, nullptr, pos.data(), N <= kFewRows};
  for (int l = 0; l < cfg_.layers; ++l) {
    block_forward_qkv(ctx, weights(l), acts_, x_);
    float* K = k_ + int64_t(l) * max_batch_ * S * KW;
    float* V = v_ + int64_t(l) * max_batch_ * S * KW;
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < P; ++t) {
        const float* row = qkv_ + (int64_t(b) * P + t) * W;
        std::memcpy(K + (int64_t(b) * S + t) * KW, row + C, sizeof(float) * KW);
        std::memcpy(V + (int64_t(b) * S + t) * KW, row + C + KW, sizeof(float) * KW);
      }
    k::attention_forward(att_, lse_, qkv_, d.attention());
    block_forward_rest(ctx, weights(l), acts_, x_);
  }
  for (int b = 0; b < B; ++b)
    std::memcpy(last_ + int64_t(b) * C, x_ + (int64_t(b) * P + P - 1) * C, sizeof(float) * C);
  return head(last_);
}

const float* KvDecoder::step(const int32_t* tokens) {
  STRATA_CHECK(B_ > 0, "KV cache: step before prefill");
  STRATA_CHECK(pos_ < cfg_.seq, "KV cache: position ", pos_, " is past the model's context (",
               cfg_.seq, " positions)");
  const int C = cfg_.dim, S = cfg_.seq, B = B_, pos = pos_;
  const int64_t KW = kv_width(), W = C + 2 * KW;
  for (int b = 0; b < B; ++b)
    STRATA_CHECK(tokens[b] >= 0 && tokens[b] < cfg_.vocab, "KV cache: token ", tokens[b],
                 " of sequence ", b, " outside [0, ", cfg_.vocab, ")");
  const std::vector<int32_t> positions(size_t(B), pos);
  k::encoder_forward(x_, tokens, view(0), cfg_.llama() ? nullptr : view(1), B, 1, C,
                     positions.data());
  // The step's queries attend over positions 0..pos of the cache (this one's keys included).
  const model::TpDims d = dims(B, 1);
  const model::BlockCtx ctx{one_, d, nothing_, nullptr, 0, nullptr, nullptr, positions.data(), B <= kFewRows};
  const k::AttentionShape over_cache = dims(B, pos + 1).attention();
  for (int l = 0; l < cfg_.layers; ++l) {
    block_forward_qkv(ctx, weights(l), acts_, x_);
    float* K = k_ + int64_t(l) * max_batch_ * S * KW;
    float* V = v_ + int64_t(l) * max_batch_ * S * KW;
    for (int b = 0; b < B; ++b) {
      std::memcpy(K + (int64_t(b) * S + pos) * KW, qkv_ + int64_t(b) * W + C, sizeof(float) * KW);
      std::memcpy(V + (int64_t(b) * S + pos) * KW, qkv_ + int64_t(b) * W + C + KW,
                  sizeof(float) * KW);
    }
    k::attention_decode(att_, qkv_, W, K, V, over_cache, S);
    block_forward_rest(ctx, weights(l), acts_, x_);
  }
  ++pos_;
  return head(x_);
}

}  // namespace strata::rlhf
