#include "ckpt/listing.h"

#include <filesystem>

#include "ckpt/fsutil.h"
#include "ckpt/load.h"

namespace fs = std::filesystem;

namespace strata::ckpt {

static void inspect_entry(CheckpointEntry& e) {
  e.bytes = dir_bytes(e.dir);
  try {
    CheckpointReader r(e.dir);
    r.verify(false);
    const Manifest& m = r.manifest();
    e.step = m.step;
    e.shards = int(m.shards.size());
    e.version = m.version;
    e.train = m.train;
    e.ok = true;
  } catch (const std::exception& x) {
    e.problem = x.what();
  }
}

CheckpointListing list_checkpoints(const std::string& path, bool inspect) {
  const CkptLocation loc = locate(path);
  CheckpointListing l;
  l.root = loc.root;
  try {
    l.latest = read_latest(loc.root).value_or("");
  } catch (const std::exception& e) {
    l.latest_error = e.what();
  }
  std::vector<std::string> dirs;
  if (!loc.step_dir.empty()) {
    dirs.push_back(loc.step_dir);
  } else {
    const std::vector<int64_t> steps = list_steps(loc.root);
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) dirs.push_back(loc.root + "/" + step_dir_name(*it));
  }
  for (const std::string& dir : dirs) {
    CheckpointEntry e;
    e.dir = dir;
    e.name = fs::path(dir).filename().string();
    e.step = parse_step_dir(e.name).value_or(-1);
    e.latest = e.name == l.latest;
    if (inspect) inspect_entry(e);
    l.entries.push_back(std::move(e));
  }
  std::error_code ec;
  for (const auto& d : fs::directory_iterator(l.root, ec)) {
    const std::string f = d.path().filename().string();
    if (f.rfind(".tmp-", 0) == 0) l.incomplete.push_back({f, dir_bytes(d.path().string())});
  }
  return l;
}

}  // namespace strata::ckpt
