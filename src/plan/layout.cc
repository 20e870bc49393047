// Layout naming, parsing and the checks every layout must pass before it is estimated.
#include "plan/layout.h"

#include "core/error.h"

namespace strata::plan {

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::none:
      return "none";
    case Recompute::selective:
      return "selective";
    case Recompute::full:
      return "full";
  }
  return "?";
}

Recompute parse_recompute(const std::string& s) {
  if (s == "none") return Recompute::none;
  if (s == "selective") return Recompute::selective;
  if (s == "full") return Recompute::full;
  fail("--recompute '", s, "' is not known (none, selective, full)");
}

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
  if (V > 1 && s.schedule != pl::ScheduleKind::interleaved)
    return cat("--virtual-stages ", V, " needs --schedule interleaved");
  if (s.schedule == pl::ScheduleKind::zb && l.zero == 3)
    return "zero-bubble defers weight gradients past ZeRO-3's per-layer gathers (zero 3)";
  if (l.pp == 1 || s.schedule != pl::ScheduleKind::interleaved) return "";
  if (s.model.layers % (l.pp * V) != 0)
    return cat("pp ", l.pp, " × virtual stages ", V, " do not divide the ", s.model.layers,
               " layers");
  if (M < l.pp || M % l.pp != 0)
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
  if (m.heads % l.tp != 0) return cat(m.heads, " attention heads are not divisible by tp ", l.tp);
  if (m.kv_heads % l.tp != 0 && l.tp % m.kv_heads != 0)
    return cat(m.kv_heads, " KV heads neither divide nor are divisible by tp ", l.tp);
  if (m.ffn % l.tp != 0) return cat("MLP width ", m.ffn, " is not divisible by tp ", l.tp);
  if (l.pp > m.layers) return cat("pp ", l.pp, " exceeds the model's ", m.layers, " layers");
  if (m.seq % l.cp != 0) return cat("sequence ", m.seq, " is not divisible by cp ", l.cp);
  if (s.cp_mode == CpMode::ulysses && l.cp > 1 && m.heads % (int64_t(l.tp) * l.cp) != 0)
    return cat(m.heads, " heads are not divisible by tp ", l.tp, " × cp ", l.cp,
               " (Ulysses splits heads over context-parallel ranks)");
  if (!m.moe() && l.ep != 1) return cat("ep ", l.ep, " needs a mixture-of-experts model");
  if (m.moe() && m.experts % l.ep != 0)
    return cat(m.experts, " experts are not divisible by ep ", l.ep);
  if ((int64_t(l.dp) * l.cp) % l.ep != 0)
    return cat("ep ", l.ep, " must divide dp ", l.dp, " × cp ", l.cp,
               " (experts are spread over data/context-parallel ranks)");
  if (s.global_batch % (int64_t(l.dp) * l.micro_batch) != 0)
    return cat("global batch ", s.global_batch, " is not divisible by dp ", l.dp, " × micro-batch ",
               l.micro_batch);
  return pipeline_problem(s, l);
}

}  // namespace strata::plan
