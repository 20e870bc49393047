// The replica-groups family, TOML section [outer]: DiLoCo's groups that meet every H steps
// across slow links (parallel/outer.h, docs/diloco.md):
//   --replica-groups 2 --inner-steps 50 --outer-lr 0.7 --outer-momentum 0.9 --group-data split
//   --fragments 4 --outer-overlap 5 --outer-mix 0.5 --outer-dtype int4      (Streaming DiLoCo)
#pragma once
#include "cli/flags/family.h"
#include "parallel/outer.h"

namespace strata::cli {

struct OuterFlags {
  parallel::OuterOptions outer;

  void add_to(CLI::App& app, const Only& only = {});
};

}  // namespace strata::cli
