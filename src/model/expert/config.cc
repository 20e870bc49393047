#include "model/expert/config.h"

#include <cmath>

#include "core/error.h"

namespace strata::model::expert {

int64_t MoEConfig::capacity(int64_t tokens) const {
  if (dropless) return tokens * top_k;
  return int64_t(std::ceil(capacity_factor * double(tokens) * top_k / experts - 1e-9));
}

void MoEConfig::validate() const {
  STRATA_CHECK(experts != 0 || shared_experts == 0, "--shared-experts ", shared_experts,
               " needs routed experts (--experts E): shared experts sit beside them in an MoE block");
  STRATA_CHECK(experts != 0 || expert_ffn == 0, "--expert-ffn ", expert_ffn, " needs routed experts (--experts E)");
  if (experts == 0) return;
  STRATA_CHECK(experts > 0, "--experts must be positive (got ", experts, ")");
  STRATA_CHECK(top_k >= 1 && top_k <= experts, "--top-k ", top_k, " must be in [1, --experts ",
               experts, "]");
  STRATA_CHECK(every >= 1, "--moe-every must be at least 1 (got ", every, ")");
  STRATA_CHECK(dropless || (std::isfinite(capacity_factor) && capacity_factor > 0),
               "--capacity-factor must be a positive number (got ", capacity_factor,
               "); use --dropless for no capacity limit");
  STRATA_CHECK(std::isfinite(aux_coef) && aux_coef >= 0, "--aux-loss-coef must be >= 0 (got ",
               aux_coef, ")");
  STRATA_CHECK(std::isfinite(z_coef) && z_coef >= 0, "--z-loss-coef must be >= 0 (got ", z_coef,
               ")");
  STRATA_CHECK(std::isfinite(jitter) && jitter >= 0 && jitter < 1,
               "--router-jitter must be in [0, 1) (got ", jitter, ")");
  STRATA_CHECK(std::isfinite(bias_rate) && bias_rate >= 0, "--router-bias-update-rate must be >= 0 (got ", bias_rate,
               ")");
  STRATA_CHECK(expert_ffn >= 0, "--expert-ffn must not be negative (got ", expert_ffn, "; 0: the dense MLP's width)");
  STRATA_CHECK(shared_experts >= 0, "--shared-experts must not be negative (got ", shared_experts, ")");
  STRATA_CHECK(route_groups >= 0 && route_max_groups >= 0, "--route-groups and --route-max-groups must not be "
               "negative (got ", route_groups, " and ", route_max_groups, ")");
  if (route_max_groups == 0) {
    STRATA_CHECK(route_groups == 0, "--route-groups ", route_groups, " needs --route-max-groups M (the groups a "
                 "token may reach)");
    return;
  }
  STRATA_CHECK(route_groups > 0, "--route-max-groups ", route_max_groups, " needs --route-groups G (the expert "
               "groups: one per host of the ep ranks)");
  STRATA_CHECK(experts % route_groups == 0, "--experts ", experts, " do not divide into --route-groups ",
               route_groups, " groups of equal size");
  STRATA_CHECK(route_max_groups <= route_groups, "--route-max-groups ", route_max_groups, " is larger than the ",
               route_groups, " groups (--route-groups)");
  STRATA_CHECK(int64_t(route_max_groups) * (experts / route_groups) >= top_k, "--route-max-groups ",
               route_max_groups, " x ", experts / route_groups, " experts per group is fewer than --top-k ", top_k,
               ": a token could not find its k experts");
}

}  // namespace strata::model::expert
