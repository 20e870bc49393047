// `strata pp schedule`: draws a pipeline schedule's per-stage timeline as text, after
// generating and validating it (parallel/pipeline/schedule.h).
//
//   strata pp schedule --pp 4 --micro-batches 8 --schedule 1f1b
//   strata pp schedule --pp 2 --micro-batches 4 --schedule interleaved --virtual-stages 2
#include <cstdint>
#include <cstdio>

#include "cli/command.h"
#include "core/error.h"
#include "parallel/pipeline/schedule.h"

namespace strata::cli::cmd_pp {
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
    // The timeline has P rows of about 2 x M x V cells: bound each count and the whole before
    // generating it, so a large count fails in one line instead of bad_alloc or minutes of work.
    constexpr int kMaxPp = 1024, kMaxMicro = 4096, kMaxVirt = 64;
    constexpr int64_t kMaxActions = int64_t(1) << 16;
    STRATA_CHECK(a->pp >= 1 && a->pp <= kMaxPp, "--pp must be in [1, ", kMaxPp, "], got ", a->pp);
    STRATA_CHECK(a->micro >= 1 && a->micro <= kMaxMicro, "--micro-batches must be in [1, ", kMaxMicro,
                 "], got ", a->micro);
    STRATA_CHECK(a->virt >= 1 && a->virt <= kMaxVirt, "--virtual-stages must be in [1, ", kMaxVirt,
                 "], got ", a->virt);
    const int64_t actions = int64_t(a->pp) * a->micro * a->virt;
    STRATA_CHECK(actions <= kMaxActions, "--pp ", a->pp, " x --micro-batches ", a->micro,
                 " x --virtual-stages ", a->virt, " = ", actions, " stage steps, more than the ",
                 kMaxActions, " a timeline can draw");
    namespace pl = parallel::pipeline;
    const pl::Schedule s =
        pl::make_schedule(pl::parse_schedule(a->schedule), a->pp, a->micro, a->virt);
    std::fputs(pl::render(s).c_str(), stdout);
  });
}

Register reg_pp("pp schedule", "Draw a pipeline schedule's per-stage timeline (validated)", setup);

}  // namespace
}  // namespace strata::cli::cmd_pp
