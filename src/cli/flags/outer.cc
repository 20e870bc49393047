#include "cli/flags/outer.h"

#include <string>

#include "cli/command.h"

namespace strata::cli {

void OuterFlags::add_to(CLI::App& app, const Only& only) {
  FamilyScope family(app, "Replica groups (DiLoCo)", "outer", only);
  app.add_option("--replica-groups", outer.groups,
                 "Replica groups that train apart and average their parameters every --inner-steps "
                 "(normally one per host or site; 1: none)")
      ->capture_default_str();
  app.add_option("--inner-steps", outer.inner_steps,
                 "Steps between the groups' outer syncs (default 100 with --replica-groups > 1; given "
                 "with one group, its outer optimizer runs alone)");
  app.add_option("--outer-lr", outer.lr, "Outer learning rate (Nesterov SGD on the groups' mean)")
      ->capture_default_str();
  app.add_option("--outer-momentum", outer.momentum, "Outer Nesterov momentum, in [0, 1)")->capture_default_str();
  app.add_option_function<std::string>(
         "--group-data", [this](const std::string& v) { outer.data = parallel::parse_group_data(v); },
         "split: each group trains its share of every --batch; same: every group the whole batch (a "
         "check: groups that agree change nothing)")
      ->check(CLI::IsMember({"split", "same"}))
      ->type_name("split|same")
      ->default_str("split");
  app.add_option("--fragments", outer.fragments,
                 "Streaming: the layers in F strided fragments, each meeting every --inner-steps at its own "
                 "offset (peak traffic / F)")
      ->capture_default_str();
  app.add_option("--outer-overlap", outer.overlap,
                 "Streaming: steps an exchange runs behind training before it is merged (0: training waits)")
      ->capture_default_str();
  app.add_option("--outer-mix", outer.mix,
                 "With --outer-overlap: the merge keeps this share of the local parameters, in [0, 1]")
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--outer-dtype", [this](const std::string& v) { outer.dtype = parallel::parse_outer_dtype(v); },
         "What crosses the groups: fp32 parameters, or the outer gradient in bf16, int8 or int4 (blocks of 64 with "
         "an fp32 scale; summed in fp32)")
      ->check(CLI::IsMember({"fp32", "bf16", "int8", "int4"}))
      ->type_name("fp32|bf16|int8|int4")
      ->default_str("fp32");
  app.add_flag("--outer-error-feedback", outer.error_feedback,
               "With --outer-dtype bf16|int8|int4: each group adds what its last encoding rounded away to the "
               "next values it sends");
}

}  // namespace strata::cli
