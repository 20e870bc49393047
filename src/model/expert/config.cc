#include "model/expert/config.h"

#include <cmath>

#include "core/error.h"
#include "model/expert/checks.h"

namespace strata::model::expert {

int64_t MoEConfig::capacity(int64_t tokens) const {
  if (dropless) return tokens * top_k;
  return int64_t(std::ceil(capacity_factor * double(tokens) * top_k / experts - 1e-9));
}

void MoEConfig::validate() const {
  check_expert_widths(experts, expert_ffn, shared_experts);
  if (experts == 0) return;
  STRATA_CHECK_SETTING(experts > 0, setting("experts"), " must be positive (got ", experts, ")");
  STRATA_CHECK_SETTING(top_k >= 1 && top_k <= experts, setting("top-k"), " ", top_k,
                       " must be in [1, ", setting("experts"), " ", experts, "]");
  STRATA_CHECK_SETTING(every >= 1, setting("moe-every"), " must be at least 1 (got ", every, ")");
  STRATA_CHECK_SETTING(dropless || (std::isfinite(capacity_factor) && capacity_factor > 0),
                       setting("capacity-factor"), " must be a positive number (got ",
                       capacity_factor, "); use ", setting("dropless"), " for no capacity limit");
  STRATA_CHECK_SETTING(std::isfinite(aux_coef) && aux_coef >= 0, setting("aux-loss-coef"),
                       " must be >= 0 (got ", aux_coef, ")");
  STRATA_CHECK_SETTING(std::isfinite(z_coef) && z_coef >= 0, setting("z-loss-coef"),
                       " must be >= 0 (got ", z_coef, ")");
  STRATA_CHECK_SETTING(std::isfinite(jitter) && jitter >= 0 && jitter < 1, setting("router-jitter"),
                       " must be in [0, 1) (got ", jitter, ")");
  STRATA_CHECK_SETTING(std::isfinite(bias_rate) && bias_rate >= 0,
                       setting("router-bias-update-rate"), " must be >= 0 (got ", bias_rate, ")");
  check_route_groups(experts, top_k, route_groups, route_max_groups);
}

}  // namespace strata::model::expert
