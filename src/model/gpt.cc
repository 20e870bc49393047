// GPT's one-process entry points over the model part it is (model/stage.h: the chunk
// [0, L) with the embedding and the head, one activation slot; the table, initialisation,
// units and hooks are the part's), whatever its tensor-, context- or expert-parallel group.
//
// Terms: B batch, T time, C channels, NH heads, Vp padded vocabulary, N = B*T rows.
// Every matmul folds (B, T) into N rows so BLAS sees one large GEMM per layer and pass.
// Activations for (max_batch, seq) are allocated once; a call with smaller (B, T) uses the
// first N rows of each. Per block and row the part keeps 16C + 2*2 + NH floats (model/block.h;
// under bf16 compute 2C + 2*2 + NH floats and 14C bf16 values), plus the embedding's output,
// the final norm's, the logits (N, Vp) and the losses.
// Cost per token: forward ~2*(12*L*C^2 + C*Vp) GEMM flops + ~2*L*C*T attention flops
// (causal, T/2 keys on average), backward about twice that (plus the attention recompute).
#include "model/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "comm/process_group.h"
#include "core/error.h"
#include "core/phase.h"
#include "core/rng.h"
#include "core/trace.h"
#include "kernels/kernels.h"
#include "model/context/gpt_cp.h"
#include "model/expert/moe.h"
#include "model/gpt_impl.h"
#include "model/shard.h"
#include "model/tensor/collectives.h"
#include "model/tensor/vocab.h"

namespace strata::model {

GPT::GPT(const GPTConfig& cfg, int max_batch, bool allocate_state, TensorComm* tp, DType compute,
         ContextComm* cp, comm::ProcessGroup* ep)
    : StageModel(cfg, {{0, cfg.layers, /*embed=*/true, /*head=*/true}}, {1}, max_batch, compute,
                 /*split_backward=*/false, tp, cp, allocate_state, ep),
      max_batch_(max_batch),
      impl_(new Impl(part(), slot(0, 0), chunks()[0])) {
  STRATA_CHECK(num_params() == local_num_params(cfg_, shard_, experts_),
               "internal: parameter table does not cover the flat buffer");
  const int cc_size = cc_ ? cc_->size() : 1;  // a cp rank keeps 1/C of each sequence
  const int64_t N = int64_t(max_batch) * ((cfg_.seq + cc_size - 1) / cc_size);
  Impl& im = *impl_;
  im.input_buf = Buffer(MemCategory::activations, (2 * sizeof(int32_t) + sizeof(float)) * N);
  im.tokens = im.input_buf.as<int32_t>();
  im.targets = im.tokens + N;
  im.weights = reinterpret_cast<float*>(im.targets + N);
}

GPT::~GPT() { delete impl_; }

int64_t GPT::activation_bytes() const {
  return StageModel::activation_bytes() + int64_t(impl_->input_buf.bytes());
}

void GPT::set_expert_group(comm::ProcessGroup* ep) {
  STRATA_CHECK_SETTING(moe() || !ep || ep->size() == 1, "expert parallelism needs ",
                       setting("experts"));
  const int P = ep ? ep->size() : 1;
  STRATA_CHECK(P == experts_.size && (P == 1 || ep->rank() == experts_.rank),
               "set_expert_group: the model holds the experts of rank ", experts_.rank, " of an ",
               "expert-parallel group of ", experts_.size, ", not of rank ", ep ? ep->rank() : 0,
               " of ", P, " (build the model with that group)");
  if (moe()) moe()->set_group(ep);
}


void check_inputs(const GPTConfig& cfg, int max_batch, const int32_t* tokens,
                         const int32_t* targets, int B, int T) {
  STRATA_CHECK(B >= 0 && B <= max_batch, "batch ", B, " outside [0, ", max_batch,
               "] (the model's maximum micro-batch)");
  STRATA_CHECK(T >= 1 && T <= cfg.seq, "sequence length ", T, " outside [1, ", cfg.seq, "]");
  const int64_t N = int64_t(B) * T;
  STRATA_CHECK(N == 0 || tokens, "forward: tokens are null");
  for (int64_t n = 0; n < N; ++n) {
    STRATA_CHECK(tokens[n] >= 0 && tokens[n] < cfg.vocab, "token ", tokens[n], " at position ", n,
                 " outside [0, ", cfg.vocab, ")");
    if (targets)
      STRATA_CHECK(targets[n] >= 0 && targets[n] < cfg.vocab, "target ", targets[n],
                   " at position ", n, " outside [0, ", cfg.vocab, ")");
  }
}

double GPT::forward(const int32_t* tokens, const int32_t* targets, const float* weights, int B,
                    int T, SampleIds ids, const int32_t* doc_start) {
  Impl& im = *impl_;
  STRATA_CHECK(B == 0 || targets, "forward: targets are null (use logits() for inference)");
  check_inputs(cfg_, max_batch_, tokens, targets, B, T);
  PhaseScope phase(PhaseKind::forward);
  const int64_t N = int64_t(B) * T;
  im.B = B;
  im.T = T;
  im.has_weights = weights != nullptr;
  if (cc_) {
    im.T = cp_take_inputs(*cc_, {tokens, targets, weights, B, T, nullptr}, im.tokens, im.targets,
                          im.weights);  // the local rows
  } else if (N > 0) {
    std::memcpy(im.tokens, tokens, sizeof(int32_t) * N);
    std::memcpy(im.targets, targets, sizeof(int32_t) * N);
    if (weights) std::memcpy(im.weights, weights, sizeof(float) * N);
  }
  if (doc_start) {
    check_doc_starts(doc_start, B, T);
    im.doc_start.assign(doc_start, doc_start + N);
  } else {
    im.doc_start.clear();
  }
  im.hidden_valid = false;
  const TokenIdsScope named(im, ids, B);  // after the cp rows: im.T holds the local rows
  double loss = im.p.forward(im.whole, im.slot, im.input(), 0, Head::loss);
  im.forward_done = true;
  im.logits_valid = !cc_ && !tc_;  // under cp the local rows only; under tp vocabulary-sharded
  if (cc_) cc_->group().all_reduce(&loss, 1);  // the whole sequence's loss on every cp rank
  return loss;
}

void GPT::backward(float scale) {
  Impl& im = *impl_;
  STRATA_CHECK(im.forward_done, "backward called without a forward with targets before it");
  im.forward_done = false;
  im.logits_valid = false;
  PhaseScope phase(PhaseKind::backward);
  im.p.backward(im.whole, im.slot, im.input(), scale, 0, /*split=*/false, Head::loss);
}

namespace {

// The tensor-parallel logits (N, Vr) of every rank gathered, columns in vocabulary order,
// into (N, Vp) in scratch (inference only: sampling).
const float* gather_vocab(GPT::Impl& im, TensorComm& tc, TpShard s, int64_t N) {
  const int64_t Vp = im.p.cfg.padded_vocab;
  const size_t need = sizeof(float) * size_t(2 * N * Vp);
  if (im.logits_full.bytes() < need) im.logits_full = Buffer(MemCategory::activations, need);
  float* blocks = im.logits_full.as<float>();
  float* out = blocks + N * Vp;
  std::vector<size_t> counts(size_t(s.size));
  for (int r = 0; r < s.size; ++r) counts[size_t(r)] = size_t(N * vocab_slice(Vp, {s.size, r}).size());
  if (N > 0) tc.group().all_gather_v_async(im.slot.logits, blocks, counts, DType::f32)->wait();
  const float* src = blocks;
  for (int r = 0; r < s.size; ++r) {
    const VocabSlice vs = vocab_slice(Vp, {s.size, r});
    for (int64_t row = 0; row < N; ++row)
      std::memcpy(out + row * Vp + vs.begin, src + row * vs.size(), sizeof(float) * vs.size());
    src += N * vs.size();
  }
  return out;
}

}  // namespace

const float* GPT::logits(const int32_t* tokens, int B, int T) {
  Impl& im = *impl_;
  if (!tokens) {
    STRATA_CHECK(im.logits_valid, "logits: no forward since the last backward");
    return im.slot.logits;
  }
  check_inputs(cfg_, max_batch_, tokens, nullptr, B, T);
  PhaseScope phase(PhaseKind::forward);
  im.forward_done = false;
  im.hidden_valid = false;
  im.B = B;
  im.T = T;
  // Logits (B, t, Vp) of im.tokens (B, t): this rank's rows, gathered over the vocabulary
  // under tp.
  auto local_logits = [&](int t) -> const float* {
    im.T = t;
    const bool training = im.p.moe && im.p.moe->training();
    if (im.p.moe) im.p.moe->set_training(false);  // inference: no router jitter
    im.p.forward(im.whole, im.slot, {im.tokens, nullptr, nullptr, B, t, nullptr}, 0, Head::logits);
    if (im.p.moe) im.p.moe->set_training(training);
    return tc_ ? gather_vocab(im, *tc_, shard_, int64_t(B) * t) : im.slot.logits;
  };
  // Sequence parallelism splits rows over tp: a prompt is padded at its end (causal
  // attention: padding changes no earlier position) to rows it can split.
  const int multiple = tc_ && tc_->sequence_parallel() ? shard_.size : 1;
  const float* out;
  if (cc_) {
    out = cp_logits(*cc_, cfg_.seq, cfg_.padded_vocab, im.logits_full, im.tokens, tokens, B, T,
                    multiple, local_logits);
  } else {
    int Tp = T;
    while (int64_t(B) * Tp % multiple != 0) ++Tp;
    STRATA_CHECK(Tp <= cfg_.seq, "logits: ", T, " tokens padded to ", Tp,
                 " for sequence parallelism exceed the position table (", cfg_.seq, ")");
    for (int b = 0; b < B; ++b) {
      std::memcpy(im.tokens + int64_t(b) * Tp, tokens + int64_t(b) * T, sizeof(int32_t) * T);
      std::fill(im.tokens + int64_t(b) * Tp + T, im.tokens + int64_t(b + 1) * Tp, 0);
    }
    float* o = const_cast<float*>(local_logits(Tp));
    const int64_t Vp = cfg_.padded_vocab;
    for (int b = 0; b < B && Tp != T; ++b)
      for (int t = 0; t < T; ++t)
        std::memmove(o + (int64_t(b) * T + t) * Vp, o + (int64_t(b) * Tp + t) * Vp,
                     sizeof(float) * Vp);
    out = o;
  }
  im.T = T;
  im.logits_valid = !cc_ && !tc_;
  return out;
}

TokenIdsScope::TokenIdsScope(GPT::Impl& im, const SampleIds& ids, int B) : im(im) {
  if (!im.p.moe || !ids.sample) return;
  im.token_positions =
      im.p.cp ? im.p.cp->layout(im.T * im.p.cp->size()).positions(im.p.cp->rank()) : std::vector<int>{};
  im.token_ids = {ids.sample, im.p.cp ? im.token_positions.data() : nullptr, B, im.T, ids.epoch};
  im.p.ids = &im.token_ids;
}

TokenIdsScope::~TokenIdsScope() { im.p.ids = nullptr; }

}  // namespace strata::model
