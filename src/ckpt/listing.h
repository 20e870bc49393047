// What `strata ckpt ls` and strata.ckpt.list report about the checkpoints a path names: one
// step directory, or every committed one of a run, newest first, each opened (manifest read,
// every shard's header and size checked, no checksums) to tell a sound one from a damaged one.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/manifest.h"

namespace strata::ckpt {

struct CheckpointEntry {
  std::string dir;            // the step directory
  std::string name;           // its file name, "step-000120"
  int64_t step = -1;          // the manifest's, else the name's, else -1
  int64_t bytes = 0;          // of its files
  int shards = 0;
  int version = 0;            // of the manifest, 0 when unreadable
  TrainState train;           // the layout that wrote it (valid when ok)
  bool ok = false;
  std::string problem;        // why it is damaged, "" when ok
  bool latest = false;        // `latest` names it
  int dp() const { return train.dp > 0 ? train.dp : train.world / std::max(1, train.tp); }
};

// A save that never committed (a .tmp- directory): removed by the next save.
struct IncompleteSave {
  std::string name;
  int64_t bytes = 0;
};

struct CheckpointListing {
  std::string root;                 // the ckpt directory
  std::string latest;               // the directory name `latest` points to, or ""
  std::string latest_error;         // why `latest` is unreadable or malformed, or ""
  std::vector<CheckpointEntry> entries;
  std::vector<IncompleteSave> incomplete;
};

// `path` is a run directory, its ckpt/ directory or one step directory (locate, load.h).
// With `inspect` false only the directories are listed (dir, name, step from the name).
CheckpointListing list_checkpoints(const std::string& path, bool inspect = true);

}  // namespace strata::ckpt
