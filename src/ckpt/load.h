// Loading checkpoints, with resharding: a checkpoint written by any layout (N ranks, tensor
// parallel or not, ZeRO stage s) loads into any other, because every rank names the flat
// ranges it holds in its own index space together with its TensorLayout, and the reader maps
// the layout's pieces onto the saved chunks (chunks.h), copying contiguous runs and reading
// and verifying only the blocks involved. Elements past Ψ_local (ZeRO padding) are zeros.
//
// Fallback: load_latest tries every committed checkpoint, newest first (`latest` is a hint:
// a crash between a commit's rename and the pointer's update leaves a newer, complete one,
// and one line says when such a one is used). A damaged one (CorruptCheckpoint: missing or
// truncated shard, wrong magic, checksum mismatch, manifest that does not match its files) is
// reported in one line and skipped; a checkpoint of a different model (ModelMismatch) stops
// the load. With several ranks, the all_ok callback (a logical AND over ranks) makes every
// rank settle on the same checkpoint even when only one of them read the damaged block.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/manifest.h"
#include "ckpt/shard_file.h"

namespace strata::ckpt {

// A flat range this rank needs from a saved state, in the index space of its layout.
struct StateTarget {
  std::string name;         // state to fill
  DType dtype = DType::f32; // of `data`; f32 <-> bf16 are converted
  Range want;               // elements; may extend past Ψ_local into ZeRO padding (zero-filled)
  void* data = nullptr;     // want.size() elements
  // States to read, in order, when `name` was not saved (a run of replica groups resumed with
  // another number of them: group1.params <- group*.params <- params). "group*.<rest>" is the
  // saved group<k>.<rest> of the lowest k (a checkpoint saved while group 0 was lost has none).
  std::vector<std::string> fallbacks;
};

// Random access to one checkpoint directory.
class CheckpointReader {
 public:
  // Reads and checks the manifest (throws CorruptCheckpoint).
  explicit CheckpointReader(std::string dir);
  const Manifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }
  // Fills `t`, whose index space `layout` describes, from the shards. Throws CorruptCheckpoint
  // for damaged data or a slice no chunk holds, ModelMismatch for a piece whose tensor the
  // checkpoint lacks or has with another shape, Error for a state that is not in it.
  void read(const StateTarget& t, const TensorLayout& layout);
  // Fills `out` (numel(tensor.shape) elements of `dtype`) with the whole global tensor of
  // `state`, assembled from whatever slices and shards the layout wrote: only the bytes that
  // hold it are read (and the blocks they touch verified).
  void read_tensor(const std::string& state, const TensorInfo& tensor, DType dtype, void* out);
  // Opens every shard and checks its header and size; with checksums also every block.
  // Returns the bytes checksummed.
  int64_t verify(bool checksums);
  int64_t bytes_read() const { return bytes_read_; }

 private:
  ShardReader& shard(size_t index);
  void copy(std::vector<CopyOp> ops, const StateInfo& st, const StateTarget& t);
  std::string dir_;
  Manifest manifest_;
  std::map<size_t, std::unique_ptr<ShardReader>> open_;
  std::vector<char> convert_;
  int64_t bytes_read_ = 0;
};

// The state a model's weights are read from: the fp32 master copy when saved, else "params".
// Throws naming checkpoint `dir` when neither was saved.
const StateInfo& model_state(const Manifest& m, const std::string& dir);

struct LoadOptions {
  std::vector<TensorInfo> expected_tensors;  // this model's global table; empty: not checked
  std::function<bool(bool)> all_ok;          // AND over ranks; null for a single process
  std::function<void(const std::string&)> log;  // default: stderr
  // This rank's layout (the index space of every target); empty: the tp=1 layout of
  // expected_tensors, or of the checkpoint's table when that is empty too.
  TensorLayout layout;
  // Called with a checkpoint's training state before any of its states is read: throws
  // (not CorruptCheckpoint) to refuse it, e.g. moments of another optimizer.
  std::function<void(const TrainState&, const std::string& dir)> check;
};

struct LoadResult {
  std::string dir;
  TrainState train;
  Manifest manifest;
  std::vector<std::string> skipped;  // one line per damaged checkpoint passed over
  double seconds = 0;
  int64_t bytes_read = 0;
};

// Throws ModelMismatch when a piece of `layout` names a tensor the checkpoint lacks or has
// with another global shape.
void check_layout_fits(const Manifest& m, const TensorLayout& layout, const std::string& dir);

// Fills target `t`, whose index space `layout` describes, from whole global tensors instead of
// a checkpoint (an import, ckpt/hf.h), placing every element as a load does: global(piece)
// returns the row-major fp32 elements of the whole tensor piece.name, valid until the next
// call (pieces come in layout order, so one tensor at a time is enough).
void fill_from_global(const StateTarget& t, const TensorLayout& layout,
                      const std::function<const float*(const TensorPiece&)>& global);

// Loads one checkpoint directory into `targets`.
LoadResult load_checkpoint(const std::string& dir, const std::vector<StateTarget>& targets,
                           const LoadOptions& opts = {});

// Loads the newest good checkpoint of <run_dir>/ckpt. Returns nullopt when the run has no
// checkpoint at all; throws when it has some but none is usable.
std::optional<LoadResult> load_latest(const std::string& run_dir,
                                      const std::vector<StateTarget>& targets,
                                      const LoadOptions& opts = {});

// The directories load_latest would try, in order: every committed one, newest first, also
// those newer than the step `latest` names (a committed directory is complete by
// construction). Notes about a missing, dangling or malformed pointer are appended to *notes.
std::vector<std::string> candidate_dirs(const std::string& root, std::vector<std::string>* notes);

// One line when step directory `dir` is newer than the one its root's `latest` names
// ("<root>/latest names step-000002, but step-000006 is newer and verifies: using it"), else "".
std::string newer_than_latest(const std::string& dir);

// The newest checkpoint of `root` whose every block verifies: the one load_latest resumes from
// (both pass over damaged ones, newest first). Each note and damaged checkpoint passed over is
// one line to `log`. nullopt when none verifies.
std::optional<std::string> newest_good(const std::string& root,
                                       const std::function<void(const std::string&)>& log);

// Resolves what a user names on the command line: a run directory, its ckpt/ directory, or
// one step directory. Returns the ckpt root and, for a step directory, that directory.
struct CkptLocation {
  std::string root;
  std::string step_dir;  // empty unless a single checkpoint was named
};
CkptLocation locate(const std::string& path);

}  // namespace strata::ckpt
