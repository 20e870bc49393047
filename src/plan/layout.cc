// Layout naming, parsing and the checks every layout must pass before it is estimated.
#include "plan/layout.h"

#include "core/error.h"
#include "cost/shapes.h"
#include "model/parallel_rules.h"
#include "parallel/parallel_layout.h"

namespace strata::plan {

std::string Layout::str() const {
  return cat("tp ", tp, " · pp ", pp, " · dp ", dp, " · cp ", cp, " · ep ", ep, " · zero ", zero,
             " · mb ", micro_batch, " · rc ", recompute_name(recompute));
}

namespace {

// The schedule's own conditions (the ones `strata train` refuses), for this layout.
std::string pipeline_problem(const TrainSetup& s, const Layout& l) {
  namespace pl = parallel::pipeline;
  const int64_t M = l.micro_batches(s.global_batch), V = s.virtual_stages;
  if (s.micro_batches > 0 && M != s.micro_batches)
    return cat("--micro-batches ", s.micro_batches, " but global batch ", s.global_batch,
               " / (dp ", l.dp, " × micro-batch ", l.micro_batch, ") = ", M);
  if (!parallel::virtual_stages_allowed(s.schedule, V))
    return cat("--virtual-stages ", V, " needs --schedule interleaved");
  if (!parallel::zero_bubble_allows_zero(s.schedule, l.zero))
    return l.zero == 3
               ? "zero-bubble defers weight gradients past ZeRO-3's per-layer gathers (zero 3)"
               : "zero-bubble defers weight gradients past ZeRO-2's gradient buckets (zero 2)";
  if (l.pp == 1 || s.schedule != pl::ScheduleKind::interleaved) return "";
  if (!parallel::chunks_divide_layers(s.model.layers, l.pp, V))
    return cat("pp ", l.pp, " × virtual stages ", V, " do not divide the ", s.model.layers,
               " layers");
  if (!parallel::interleaved_micro_batches_fit(M, l.pp))
    return cat("interleaved needs micro-batches a multiple of pp: ", M, " micro-batches, pp ",
               l.pp);
  return "";
}

}  // namespace

std::string layout_problem(const TrainSetup& s, const Layout& l) {
  const ModelSpec& m = s.model;
  const int64_t G = s.gpu.gpus_per_node;
  if (l.tp < 1 || l.pp < 1 || l.dp < 1 || l.cp < 1 || l.ep < 1 || l.micro_batch < 1)
    return cat("parallel degrees and the micro-batch must be at least 1 (", l.str(), ")");
  if (l.gpus() != s.gpus)
    return cat("tp ", l.tp, " × pp ", l.pp, " × cp ", l.cp, " × dp ", l.dp, " = ", l.gpus(),
               " GPUs, but --gpus is ", s.gpus);
  if (l.zero < 0 || l.zero > 3) return cat("ZeRO stage ", l.zero, " does not exist (0, 1, 2 or 3)");
  if (l.tp > G || G % l.tp != 0)
    return cat("tp ", l.tp, " does not fit inside a node of ", G,
               " GPUs (tensor parallelism stays on the intra-node links)");
  if (!model::tp_splits_heads(m.heads, l.tp))
    return cat(m.heads, " attention heads are not divisible by tp ", l.tp);
  if (!model::splits_kv_heads(m.kv_heads, l.tp))
    return cat(m.kv_heads, " KV heads neither divide nor are divisible by tp ", l.tp);
  if (m.ffn % l.tp != 0) return cat("MLP width ", m.ffn, " is not divisible by tp ", l.tp);
  if (m.moe() && (m.expert_width() % l.tp != 0 || m.shared_width() % l.tp != 0))
    return cat("expert width ", m.expert_width(),
               m.shared_width() > 0 ? cat(" or shared experts' width ", m.shared_width()) : "",
               " is not divisible by tp ", l.tp);
  if (!parallel::stages_fit_layers(l.pp, m.layers))
    return cat("pp ", l.pp, " exceeds the model's ", m.layers, " layers");
  if (m.seq % l.cp != 0) return cat("sequence ", m.seq, " is not divisible by cp ", l.cp);
  if (s.cp_mode == CpMode::ulysses && l.cp > 1 && !model::ulysses_splits_heads(m.heads, l.tp, l.cp))
    return cat(m.heads, " heads are not divisible by tp ", l.tp, " × cp ", l.cp,
               " (Ulysses splits heads over context-parallel ranks)");
  if (s.cp_mode == CpMode::ulysses && l.cp > 1 &&
      !model::splits_kv_heads(cost::tp_kv_heads(m.kv_heads, l.tp), l.cp))
    return cat(cost::tp_kv_heads(m.kv_heads, l.tp), " KV heads per tp rank neither divide nor are "
               "divisible by cp ", l.cp, " (Ulysses splits or replicates them over cp ranks)");
  if (!model::ep_has_experts(m.experts, l.ep))
    return cat("ep ", l.ep, " needs a mixture-of-experts model");
  if (m.moe() && !model::ep_splits_experts(m.experts, l.ep))
    return cat(m.experts, " experts are not divisible by ep ", l.ep);
  if (!parallel::ep_divides_dp_cp(l.dp, l.cp, l.ep))
    return cat("ep ", l.ep, " must divide dp ", l.dp, " × cp ", l.cp,
               " (experts are spread over data/context-parallel ranks)");
  if (!parallel::batch_splits(s.global_batch, l.dp, l.micro_batch))
    return cat("global batch ", s.global_batch, " is not divisible by dp ", l.dp, " × micro-batch ",
               l.micro_batch);
  return pipeline_problem(s, l);
}

}  // namespace strata::plan
