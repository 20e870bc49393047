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
}

}  // namespace strata::cli
