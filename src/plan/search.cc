// Layout enumeration, ranking, explanation and the scan for the smallest cluster that fits.
#include "plan/search.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "core/error.h"
#include "model/parallel_rules.h"

namespace strata::plan {

namespace {

std::vector<int> divisors(int64_t n, int64_t cap) {
  std::vector<int> d;
  for (int64_t i = 1; i <= n && i <= cap; ++i)
    if (n % i == 0) d.push_back(int(i));
  return d;
}

template <typename T>
std::vector<T> one_or(const std::optional<T>& fixed, std::vector<T> all) {
  if (fixed) return {*fixed};
  return all;
}

std::string pct(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", 100 * x);
  return b;
}

std::string num(double x, const char* f = "%.3g") {
  char b[32];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

// Micro-batch sizes to try at this dp: the one that gives the fixed micro-batch count, else all.
std::vector<int> micros_for(const TrainSetup& s, int64_t dp, const std::vector<int>& all) {
  if (s.micro_batches <= 0) return all;
  const int64_t per = dp * s.micro_batches;
  if (s.global_batch % per) return {};
  return {int(s.global_batch / per)};
}

// Visits every layout the fixed parts and the setup allow (layout_problem may still reject).
template <typename Fn>
void for_each_layout(const TrainSetup& s, const FixedLayout& f, const std::vector<int>& zeros,
                     const std::vector<int>& micros_cap, const std::vector<Recompute>& rcs,
                     Fn&& fn) {
  const ModelSpec& m = s.model;
  const int64_t N = s.gpus, G = s.gpu.gpus_per_node;
  for (int tp : one_or(f.tp, divisors(G, G))) {
    if (N % tp) continue;
    // strata's Muon gathers a tp-split matrix from equal slices: no key/value head shared by ranks.
    if (s.optimizer == Optimizer::muon && tp > 1 && m.kv_heads < tp) continue;
    for (int pp : one_or(f.pp, divisors(N / tp, m.layers))) {
      if ((N / tp) % pp) continue;
      for (int cp : one_or(f.cp, divisors(N / tp / pp, 64))) {
        if ((N / tp / pp) % cp || m.seq % cp) continue;
        const int64_t dp = N / tp / pp / cp;
        if (f.dp && *f.dp != dp) continue;
        std::vector<int> eps{1};
        if (m.moe()) eps = divisors(std::gcd<int64_t>(m.experts, dp * cp), m.experts);
        for (int ep : one_or(f.ep, eps)) {
          for (int zero : zeros) {
            // Without data-parallel peers every ZeRO stage is stage 0.
            if (zero > 0 && dp * cp == 1 && !f.zero) continue;
            for (int mb : micros_for(s, dp, micros_cap)) {
              if (s.global_batch % (dp * mb)) continue;
              for (Recompute rc : rcs) {
                Layout l{tp, pp, int(dp), cp, ep, zero, mb, rc};
                if (!fn(l)) return;
              }
            }
          }
        }
      }
    }
  }
}

std::vector<int> micro_options(const FixedLayout& f) {
  if (f.micro_batch) return {*f.micro_batch};
  return {1, 2, 4, 8, 16, 32, 64};
}

}  // namespace

std::string fmt_bytes_gib(double bytes) {
  return num(bytes / (1024.0 * 1024 * 1024), "%.1f") + " GiB";
}

void check_fixed(const TrainSetup& s, const FixedLayout& f) {
  const ModelSpec& m = s.model;
  const int64_t N = s.gpus, G = s.gpu.gpus_per_node;
  STRATA_CHECK(N >= 1, "--gpus must be at least 1 (got ", N, ")");
  STRATA_CHECK(s.global_batch >= 1, "--global-batch must be at least 1 (got ", s.global_batch, ")");
  for (auto [name, v] : {std::pair{"--tp", f.tp},
                         {"--pp", f.pp},
                         {"--dp", f.dp},
                         {"--cp", f.cp},
                         {"--ep", f.ep},
                         {"--micro-batch", f.micro_batch}})
    STRATA_CHECK(!v || *v >= 1, name, " must be at least 1 (got ", *v, ")");
  if (f.zero)
    STRATA_CHECK(*f.zero >= 0 && *f.zero <= 3, "--zero ", *f.zero,
                 " does not exist (0, 1, 2 or 3)");
  std::string expr;
  int64_t product = 1;
  int given = 0;
  for (auto [name, v] : {std::pair{"tp", f.tp}, {"pp", f.pp}, {"cp", f.cp}, {"dp", f.dp}}) {
    if (!v) continue;
    expr += cat(expr.empty() ? "" : " × ", name, " ", *v);
    product *= *v;
    ++given;
  }
  if (given == 4)
    STRATA_CHECK(product == N, expr, " = ", product, " GPUs, but --gpus is ", N);
  else if (given > 0)
    STRATA_CHECK(N % product == 0, expr, " = ", product, " does not divide --gpus ", N);
  if (f.tp) {
    STRATA_CHECK(*f.tp <= G && G % *f.tp == 0, "--tp ", *f.tp, " does not fit inside a node of ", G,
                 " GPUs (tensor parallelism stays on the intra-node links)");
    STRATA_CHECK(m.heads % *f.tp == 0, "--tp ", *f.tp, ": the model's ", m.heads,
                 " attention heads are not divisible by ", *f.tp);
    STRATA_CHECK(model::splits_kv_heads(m.kv_heads, *f.tp), "--tp ", *f.tp, ": ",
                 m.kv_heads, " KV heads neither divide nor are divisible by it");
    STRATA_CHECK(m.ffn % *f.tp == 0, "--tp ", *f.tp, ": MLP width ", m.ffn, " is not divisible");
    STRATA_CHECK(!m.moe() || (m.expert_width() % *f.tp == 0 && m.shared_width() % *f.tp == 0),
                 "--tp ", *f.tp, ": the experts' hidden width ", m.expert_width(),
                 m.shared_width() > 0 ? cat(" or the shared experts' ", m.shared_width()) : "",
                 " is not divisible (--expert-ffn)");
  }
  if (f.pp) STRATA_CHECK(*f.pp <= m.layers, "--pp ", *f.pp, " exceeds the ", m.layers, " layers");
  namespace pl = parallel::pipeline;
  const int V = s.virtual_stages;
  STRATA_CHECK(V >= 1, "--virtual-stages must be at least 1 (got ", V, ")");
  STRATA_CHECK(V == 1 || s.schedule == pl::ScheduleKind::interleaved, "--virtual-stages ", V,
               " needs --schedule interleaved (got ", pl::schedule_name(s.schedule), ")");
  STRATA_CHECK(s.micro_batches >= 0, "--micro-batches must be at least 1 (got ", s.micro_batches, ")");
  if (f.pp && *f.pp > 1 && s.schedule == pl::ScheduleKind::interleaved) {
    STRATA_CHECK(m.layers % (int64_t(*f.pp) * V) == 0, "--pp ", *f.pp, " x --virtual-stages ", V,
                 " = ", *f.pp * V, " chunks do not divide the ", m.layers, " layers");
    if (s.micro_batches > 0)
      STRATA_CHECK(s.micro_batches % *f.pp == 0, "--schedule interleaved needs --micro-batches a "
                   "multiple of --pp: ", s.micro_batches, " is not a multiple of ", *f.pp);
  }
  if (f.cp)
    STRATA_CHECK(m.seq % *f.cp == 0, "--cp ", *f.cp, ": sequence ", m.seq,
                 " is not divisible by it");
  if (f.ep) {
    STRATA_CHECK(m.moe() || *f.ep == 1, "--ep ", *f.ep,
                 " needs a mixture-of-experts model "
                 "(--experts)");
    if (m.moe())
      STRATA_CHECK(m.experts % *f.ep == 0, "--ep ", *f.ep, ": ", m.experts,
                   " experts are not divisible by it");
  }
  if (f.dp && f.micro_batch)
    STRATA_CHECK(s.global_batch % (int64_t(*f.dp) * *f.micro_batch) == 0, "global batch ",
                 s.global_batch, " is not divisible by dp ", *f.dp, " × micro-batch ",
                 *f.micro_batch);
  else if (f.dp)
    STRATA_CHECK(s.global_batch % *f.dp == 0, "global batch ", s.global_batch,
                 " is not divisible by dp ", *f.dp);
}

SearchResult search_layouts(const TrainSetup& s, const FixedLayout& f, size_t keep) {
  SearchResult r;
  std::vector<Estimate> too_big;
  const std::vector<int> zeros = f.zero ? std::vector<int>{*f.zero} : std::vector<int>{0, 1, 2, 3};
  const std::vector<Recompute> rcs =
      f.recompute ? std::vector<Recompute>{*f.recompute}
                  : std::vector<Recompute>{Recompute::none, Recompute::selective, Recompute::full};
  for_each_layout(s, f, zeros, micro_options(f), rcs, [&](const Layout& l) {
    ++r.considered;
    std::string problem = layout_problem(s, l);
    if (!problem.empty()) {
      ++r.invalid;
      if (r.sample_problem.empty()) r.sample_problem = problem;
      return true;
    }
    Estimate e = evaluate(s, l);
    if (!r.least_memory || e.mem.total() < r.least_memory->mem.total()) r.least_memory = e;
    if (e.fits) {
      ++r.fit;
      r.ranked.push_back(std::move(e));
    } else {
      ++r.too_big;
      too_big.push_back(std::move(e));
    }
    return true;
  });
  auto faster = [](const Estimate& a, const Estimate& b) {
    if (a.time.step_s != b.time.step_s) return a.time.step_s < b.time.step_s;
    return a.mem.total() < b.mem.total();
  };
  std::sort(r.ranked.begin(), r.ranked.end(), faster);
  if (r.ranked.size() > keep) r.ranked.resize(keep);
  std::sort(too_big.begin(), too_big.end(), faster);
  for (Estimate& e : too_big) {  // the fastest few of distinct shapes
    if (r.faster_too_big.size() >= 3) break;
    if (!r.ranked.empty() && e.time.step_s >= r.ranked[0].time.step_s) break;
    bool seen = false;
    for (const Estimate& x : r.faster_too_big)
      seen |= x.layout.tp == e.layout.tp && x.layout.pp == e.layout.pp &&
              x.layout.cp == e.layout.cp && x.layout.ep == e.layout.ep;
    if (!seen) r.faster_too_big.push_back(std::move(e));
  }
  if (r.considered == 0 && r.sample_problem.empty())
    r.sample_problem = cat("no combination of the fixed degrees divides ", s.gpus,
                           " GPUs with global batch ", s.global_batch);
  return r;
}

namespace {

struct Component {
  const char* name;
  double TimeBreakdown::*field;
};

const Component kComponents[] = {
    {"compute", &TimeBreakdown::compute},
    {"recomputation", &TimeBreakdown::recompute},
    {"pipeline bubble", &TimeBreakdown::bubble},
    {"tensor-parallel comm", &TimeBreakdown::tp},
    {"context-parallel comm", &TimeBreakdown::cp},
    {"expert all-to-all", &TimeBreakdown::ep},
    {"pipeline send/recv", &TimeBreakdown::pp},
    {"ZeRO per-micro-batch comm", &TimeBreakdown::zero_micro},
    {"exposed gradient sync", &TimeBreakdown::dp_final},
    {"optimizer step", &TimeBreakdown::optimizer},
};

std::string why_slower(const Estimate& a, const Estimate& best, const TrainSetup& s) {
  const Component* worst = nullptr;
  double most = 0;
  for (const Component& c : kComponents) {
    double d = a.time.*c.field - best.time.*c.field;
    if (d > most) most = d, worst = &c;
  }
  if (a.time.step_s - best.time.step_s < 1e-3 * best.time.step_s)
    return "a tie with the best (within 0.1%)";
  if (!worst) return "no single cost dominates";
  const std::string name = worst->name;
  if (name == "pipeline bubble")
    return cat("mostly pipeline bubble (", parallel::pipeline::schedule_name(s.schedule), ", pp ",
               a.layout.pp, ", ", a.micro_batches, " micro-batches: ", num(a.bubble_fraction()),
               " of the schedule vs ", num(best.bubble_fraction()), ")");
  if (name == "recomputation")
    return cat("mostly recomputation (", recompute_name(a.layout.recompute), " vs ",
               recompute_name(best.layout.recompute), ")");
  if (name == "compute")
    return cat("mostly more compute on the busiest stage (",
               (s.model.layers + a.layout.pp - 1) / a.layout.pp,
               " layers, rounded up, and the logits on the last stage)");
  return cat("mostly ", name, " (", num(a.time.*worst->field), " s vs ",
             num(best.time.*worst->field), " s per step)");
}

}  // namespace

std::vector<std::string> explain(const SearchResult& r, const TrainSetup& s, int runners_up) {
  std::vector<std::string> out;
  if (r.ranked.empty()) return out;
  const Estimate& best = r.ranked[0];
  out.push_back(cat("best: ", best.layout.str(), ": step ", num(best.time.step_s), " s, MFU ",
                    pct(best.mfu), ", ", fmt_bytes_gib(best.mem.total()), " of ",
                    fmt_bytes_gib(best.usable_bytes), " usable per GPU"));
  std::string parts;
  for (const Component& c : kComponents) {
    double x = best.time.*c.field / best.time.step_s;
    if (x >= 0.005) parts += cat(parts.empty() ? "" : ", ", c.name, " ", pct(x));
  }
  out.push_back("its step time: " + parts);
  // Runners-up of other parallel shapes first (they say the most), then other variants.
  std::vector<const Estimate*> picked;
  auto differs = [&](const Estimate& e, bool by_shape) {
    for (const Estimate* x : picked) {
      const Layout &a = x->layout, &b = e.layout;
      bool same_shape = a.tp == b.tp && a.pp == b.pp && a.cp == b.cp && a.ep == b.ep;
      if (same_shape && (by_shape || (a.zero == b.zero && a.recompute == b.recompute)))
        return false;
    }
    return true;
  };
  picked.push_back(&best);
  for (bool by_shape : {true, false})
    for (size_t i = 1; i < r.ranked.size() && int(picked.size()) <= runners_up; ++i)
      if (differs(r.ranked[i], by_shape)) picked.push_back(&r.ranked[i]);
  std::sort(picked.begin() + 1, picked.end(),
            [](const Estimate* a, const Estimate* b) { return a->time.step_s < b->time.step_s; });
  for (size_t i = 1; i < picked.size(); ++i) {
    const Estimate& e = *picked[i];
    out.push_back(cat("runner-up ", e.layout.str(), ": +",
                      pct(e.time.step_s / best.time.step_s - 1),
                      " step time: ", why_slower(e, best, s),
                      e.mem.total() < best.mem.total()
                          ? cat("; needs less memory (", fmt_bytes_gib(e.mem.total()), ")")
                          : ""));
  }
  for (const Estimate& e : r.faster_too_big)
    out.push_back(cat("does not fit: ", e.layout.str(), " would be ",
                      pct(1 - e.time.step_s / best.time.step_s), " faster but needs ",
                      fmt_bytes_gib(e.mem.total()), " > ", fmt_bytes_gib(e.usable_bytes),
                      " usable"));
  return out;
}

namespace {

std::optional<Layout> first_fit(const TrainSetup& s, const FixedLayout& f, double* bytes) {
  const std::vector<int> zeros = f.zero ? std::vector<int>{*f.zero} : std::vector<int>{3, 2, 1, 0};
  const std::vector<int> micro{f.micro_batch.value_or(1)};
  const std::vector<Recompute> rcs{f.recompute.value_or(Recompute::full)};
  const double usable = s.gpu.memory_bytes() * (1.0 - s.headroom);
  std::optional<Layout> found;
  for_each_layout(s, f, zeros, micro, rcs, [&](const Layout& l) {
    if (!layout_problem(s, l).empty()) return true;
    double t = estimate_memory(s, l).total();
    if (t <= usable) {
      found = l;
      *bytes = t;
      return false;
    }
    return true;
  });
  return found;
}

}  // namespace

ClusterFit smallest_fitting_cluster(const TrainSetup& base, const FixedLayout& fixed,
                                    int64_t max_gpus) {
  FixedLayout f = fixed;
  f.dp.reset();
  TrainSetup s = base;
  ClusterFit fit;
  auto try_n = [&](int64_t n) {
    s.gpus = n;
    double bytes = 0;
    if (auto l = first_fit(s, f, &bytes)) {
      fit.found = true;
      fit.gpus = n;
      fit.layout = *l;
      fit.bytes = bytes;
      return true;
    }
    return false;
  };
  const int64_t G = base.gpu.gpus_per_node;
  for (int d : divisors(G, G - 1))
    if (d > base.gpus && try_n(d)) return fit;
  // Whole nodes: probe by doubling, then scan between the last miss and the first hit.
  int64_t lo = base.gpus / G;  // nodes known (or assumed) not to fit
  int64_t k = lo + 1, hi = 0;
  while (k * G <= max_gpus) {
    if (try_n(k * G)) {
      hi = k;
      break;
    }
    lo = k;
    k *= 2;
  }
  if (!hi) return fit;
  const ClusterFit at_hi = fit;
  const int64_t step = std::max<int64_t>(1, (hi - lo) / 2048);
  fit.step_gpus = step * G;
  for (int64_t n = lo + step; n < hi; n += step)
    if (try_n(n * G)) {
      fit.step_gpus = step * G;
      return fit;
    }
  fit = at_hi;
  fit.step_gpus = step * G;
  return fit;
}

}  // namespace strata::plan
