// A stand-in for the trainer in the hang doctor's end-to-end tests: a data-parallel loop
// over the real communicator that sets the training phase as the trainer does (core/phase.h)
// and takes the fault-injection flags (cli/flags/fault.h). Per step: data loading, forward
// over the layers, backward from the last layer down with one all-reduce of 256*(layer+1)
// floats per layer, an all-reduce of the gradient norm in the optimizer, and a checkpoint
// save. skip-collective and wrong-count hit the all-reduce of layer 1.
//
//   strata launch -n 3 --timeout 2 -- diag_worker --steps 4 --inject hang --inject-rank 1 --inject-step 2
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "comm/process_group.h"
#include "comm/watchdog.h"
#include "core/error.h"
#include "core/phase.h"
#include "cli/flags/fault.h"

using namespace strata;

static void compute_ms(double ms) { std::this_thread::sleep_for(std::chrono::microseconds(int64_t(ms * 1000))); }

int main(int argc, char** argv) {
  CLI::App app{"diag_worker"};
  int steps = 4, layers = 3;
  bool dump_at_end = false;
  cli::FaultFlags flags;
  flags.add_to(app);
  app.add_option("--steps", steps);
  app.add_option("--layers", layers);
  app.add_flag("--dump-at-end", dump_at_end);
  CLI11_PARSE(app, argc, argv);
  try {
    comm::Options opt;
    opt.timeout_s = flags.timeout_s;
    comm::GroupPtr pg = comm::init_from_env(opt);
    diag::FaultSpec fault = flags.resolve(pg->size(), steps);
    int me = pg->rank();
    if (me == 0) std::printf("base_seq=%llu\n", (unsigned long long)pg->next_seq()), std::fflush(stdout);
    std::vector<float> grad(size_t(256) * layers, 1.0f);
    float norm = 1.0f;
    PhaseState& phase = current_phase();
    for (int step = 0; step < steps; ++step) {
      bool hit = fault.fires(me, step);
      phase.set(step, -1, PhaseKind::data);
      compute_ms(1);
      if (hit && fault.kind == diag::FaultKind::kill) raise(SIGKILL);
      if (hit && fault.kind == diag::FaultKind::exit) _exit(3);
      for (int l = 0; l < layers; ++l) {
        phase.set(step, l, PhaseKind::forward);
        if (hit && l == 0 && fault.kind == diag::FaultKind::hang)
          for (;;) pause();
        if (hit && l == 0 && fault.kind == diag::FaultKind::sleep) compute_ms(fault.sleep_s * 1e3);
        compute_ms(1);
      }
      for (int l = layers - 1; l >= 0; --l) {
        phase.set(step, l, PhaseKind::backward);
        compute_ms(1);
        size_t count = size_t(256) * (l + 1);
        if (hit && l == 1 && fault.kind == diag::FaultKind::skip_collective) continue;
        if (hit && l == 1 && fault.kind == diag::FaultKind::wrong_count) count /= 2;
        pg->all_reduce(grad.data(), count);
      }
      phase.set(step, -1, PhaseKind::optimizer);
      pg->all_reduce(&norm, 1);
      phase.set(step, -1, PhaseKind::checkpoint);
      if (hit && fault.kind == diag::FaultKind::kill_during_save) raise(SIGKILL);
      compute_ms(1);
    }
    phase.set(steps, -1, PhaseKind::idle);
    pg->barrier();
    if (dump_at_end) comm::dump_flight_recorder("end of run");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "diag_worker: %s\n", e.what());
    return 1;
  }
}
