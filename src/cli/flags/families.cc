// The registry of every family's settings (cli/flags/family.h family_keys): a family added to
// strata is added here too, so run configs know its keys in every command.
#include <CLI/CLI.hpp>

#include "cli/flags/checkpoint.h"
#include "cli/flags/data.h"
#include "cli/flags/family.h"
#include "cli/flags/fault.h"
#include "cli/flags/hosts.h"
#include "cli/flags/metrics.h"
#include "cli/flags/model.h"
#include "cli/flags/optimizer.h"
#include "cli/flags/outer.h"
#include "cli/flags/parallel.h"
#include "cli/flags/training.h"

namespace strata::cli {

const std::map<std::string, std::string>& family_keys() {
  static const std::map<std::string, std::string> keys = [] {
    // Every family declared on one app that is never parsed: its options' names and groups.
    static CLI::App app;
    static ModelFlags model;
    static DataFlags data;
    static TrainingFlags training;
    static OptimizerFlags optimizer;
    static ParallelFlags parallel;
    static HostFlags hosts;
    static OuterFlags outer;
    static CheckpointFlags checkpoint;
    static MetricsFlags metrics;
    static FaultFlags fault;
    static RecoveryFlags recovery;
    model.add_to(app);
    data.add_to(app);
    training.add_to(app);
    optimizer.add_to(app);
    parallel.add_to(app);
    hosts.add_to(app);
    outer.add_to(app);
    checkpoint.add_to(app);
    metrics.add_to(app);
    fault.add_to(app);
    recovery.add_to(app);
    std::map<std::string, std::string> m;
    for (const CLI::Option* o : app.get_options())
      for (const std::string& name : o->get_lnames()) m[name] = section_of(*o, "");
    m.erase("help");
    return m;
  }();
  return keys;
}

}  // namespace strata::cli
