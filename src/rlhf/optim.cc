// AdamW over several ranges (optim.h).
#include "rlhf/optim.h"

#include <cmath>
#include <cstring>

#include "kernels/adamw.h"

namespace strata::rlhf {

void AdamWGroup::add(std::string name, float* p, float* g, int64_t n,
                     std::vector<model::DecayRange> spans) {
  Range r{std::move(name), p, g, n, std::move(spans), Buffer(MemCategory::optimizer, sizeof(float) * n),
          Buffer(MemCategory::optimizer, sizeof(float) * n)};
  std::memset(r.m.data(), 0, sizeof(float) * n);
  std::memset(r.v.data(), 0, sizeof(float) * n);
  ranges_.push_back(std::move(r));
}

double AdamWGroup::sum_squares() const {
  double sum_sq = 0;
  for (const Range& r : ranges_) sum_sq += kernels::sum_squares(r.g, r.n);
  return sum_sq;
}

void AdamWGroup::apply(float lr, float grad_scale) {
  const kernels::AdamWStep s = parallel::adamw_step(cfg_, lr, ++steps_, grad_scale);
  for (Range& r : ranges_) {
    std::vector<model::DecayRange> spans = r.spans;
    if (spans.empty()) spans.push_back({0, r.n, false});
    for (const model::DecayRange& sp : spans)
      kernels::adamw_update(r.p + sp.begin, r.g + sp.begin, r.m.as<float>() + sp.begin,
                            r.v.as<float>() + sp.begin, sp.end - sp.begin, sp.decay, s);
  }
}

std::vector<NamedTensor> AdamWGroup::tensors(const std::string& prefix) const {
  std::vector<NamedTensor> out;
  for (const Range& r : ranges_) {
    out.push_back({prefix + r.name + ".params", r.p, r.n});
    out.push_back({prefix + r.name + ".exp_avg", r.m.as<float>(), r.n});
    out.push_back({prefix + r.name + ".exp_avg_sq", r.v.as<float>(), r.n});
  }
  return out;
}

}  // namespace strata::rlhf
