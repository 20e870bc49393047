// `strata pp schedule`: draws a pipeline schedule's per-stage timeline as text, after
// generating and validating it (parallel/pipeline/schedule.h).
//
//   strata pp schedule --pp 4 --micro-batches 8 --schedule 1f1b
//   strata pp schedule --pp 2 --micro-batches 4 --schedule interleaved --virtual-stages 2
#include <cstdio>

#include "cli/command.h"
#include "parallel/pipeline/schedule.h"

namespace strata::cli {
namespace {

struct ScheduleArgs {
  int pp = 2, micro = 4, virt = 1;
  std::string schedule = "1f1b";
};

void setup(CLI::App& app) {
  auto a = std::make_shared<ScheduleArgs>();
  app.add_option("--pp", a->pp, "pipeline stages P")->capture_default_str();
  app.add_option("--micro-batches", a->micro, "micro-batches M per step")->capture_default_str();
  app.add_option("--schedule", a->schedule, "gpipe | 1f1b | interleaved | zb")
      ->capture_default_str();
  app.add_option("--virtual-stages", a->virt, "model chunks V per stage (interleaved)")
      ->capture_default_str();
  app.callback([a] {
    namespace pl = parallel::pipeline;
    const pl::Schedule s =
        pl::make_schedule(pl::parse_schedule(a->schedule), a->pp, a->micro, a->virt);
    std::fputs(pl::render(s).c_str(), stdout);
  });
}

Register reg("pp schedule", "Draw a pipeline schedule's per-stage timeline (validated)", setup);

}  // namespace
}  // namespace strata::cli
