#include "cli/flags/checkpoint.h"

#include <cmath>

#include "ckpt/interval.h"
#include "cli/command.h"
#include "core/error.h"

namespace strata::cli {

void CheckpointFlags::add_to(CLI::App& app, const Only& only) {
  FamilyScope family(app, "Checkpoints", "checkpoint", only);
  train::CheckpointConfig& c = ckpt;
  app.add_option("--ckpt-every", c.every, "Checkpoint every N steps into <run-dir>/ckpt (0: off)")->capture_default_str();
  app.add_option("--mem-ckpt-every", c.mem_every,
                 "Copy every rank's state into shared memory on its host every K steps, for a "
                 "restart that loses at most K steps and for --spike-action rollback (0: off)")
      ->capture_default_str();
  app.add_option("--mem-ckpt-replicas", c.mem_replicas,
                 "Peers on other hosts that also hold each in-memory copy, so a lost host's ranks "
                 "resume from memory under --elastic (0 or 1; 1 needs a second host)")
      ->capture_default_str();
  app.add_option("--mem-ckpt-replica-mbps", c.mem_replica_mbps,
                 "Pace of each rank's replica sends in MB/s, so training's collectives keep the link "
                 "(0: unpaced); replicas are then as fresh as this pace allows")
      ->capture_default_str()
      ->check(finite(NumberRange::non_negative()));
  app.add_option("--ckpt-keep", c.keep, "Keep the newest K checkpoints (0: all)")->capture_default_str();
  app.add_option("--ckpt-max-failures", c.max_failures,
                 "Stop the run when this many checkpoint saves in a row fail (0: never)")
      ->capture_default_str();
  app.add_option("--ckpt-keep-every", c.keep_every, "Also keep every checkpoint whose step is a multiple of M");
  app.add_option("--resume", c.resume,
                 "auto (latest good checkpoint in <run-dir>/ckpt; none: start fresh) or PATH "
                 "(a run dir, its ckpt/ dir or a step-* dir)")
      ->check(dir_path({"auto", "none"}));
  app.add_option("--mtbf", mtbf, "Mean time between failures (e.g. 4h): prints the optimal "
                 "checkpoint interval (Young, Daly) from the measured save stall");
}

train::CheckpointConfig CheckpointFlags::resolve(const CLI::App& app) const {
  train::CheckpointConfig c = ckpt;
  if (app.count("--resume"))
    STRATA_CHECK(!c.resume.empty(), "--resume needs a value: auto, or a run directory, its "
                 "ckpt/ directory or a step-* directory");
  STRATA_CHECK(c.mem_every >= 0, "--mem-ckpt-every must be >= 0 (got ", c.mem_every, ")");
  STRATA_CHECK(c.mem_replicas >= 0, "--mem-ckpt-replicas must be >= 0 (got ", c.mem_replicas, ")");
  STRATA_CHECK(std::isfinite(c.mem_replica_mbps) && c.mem_replica_mbps >= 0,
               "--mem-ckpt-replica-mbps must be a number of MB/s >= 0 (0: unpaced), got ", c.mem_replica_mbps);
  if (!mtbf.empty()) c.mtbf_s = ckpt::parse_duration(mtbf);
  return c;
}

}  // namespace strata::cli
