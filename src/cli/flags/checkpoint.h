// The checkpoint family, TOML section [checkpoint]: disk checkpoints and resume
// (train/checkpointing.h), in-memory copies and their replicas on other hosts:
//   --ckpt-every 100 --ckpt-keep 2 --resume auto --mtbf 4h
//   --mem-ckpt-every 10 --mem-ckpt-replicas 1 --mem-ckpt-replica-mbps 20
#pragma once
#include <string>

#include "cli/flags/family.h"
#include "train/config.h"

namespace strata::cli {

struct CheckpointFlags {
  train::CheckpointConfig ckpt;
  std::string mtbf;  // e.g. "4h"

  void add_to(CLI::App& app, const Only& only = {});
  // After parsing: the settings that need no other family (the sign of each count, --mtbf);
  // the ones that depend on the hosts, the run dir or the guard are the run's (cmd_train.cc).
  train::CheckpointConfig resolve(const CLI::App& app) const;
};

}  // namespace strata::cli
