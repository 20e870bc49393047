// The checkpoint manifest (manifest.json in each step directory): what a checkpoint holds and
// where. It names every global tensor (name, shape, element offset in the flat state), every
// state (name, dtype, Ψ), and for every shard file the pieces it stores: which flat range of
// which state, at which byte offset, and an xxHash64 per block of `block_bytes`, so a load can
// verify exactly the blocks it reads. It also carries the training state needed to resume.
//
// Two error kinds on read: CorruptCheckpoint (damaged or inconsistent files; a loader falls
// back to an older checkpoint) and ModelMismatch (a healthy checkpoint of another model; a
// loader stops, since every older one belongs to the same run and would not fit either).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ckpt/ranges.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "nlohmann/json.hpp"

namespace strata::ckpt {

inline constexpr int kManifestVersion = 1;

class CorruptCheckpoint : public Error {
 public:
  using Error::Error;
};

class ModelMismatch : public Error {
 public:
  using Error::Error;
};

// One named view of the flat state (the model's parameter table).
struct TensorInfo {
  std::string name;
  Shape shape;
  int64_t offset = 0;  // elements from the start of the flat state
};

struct RngState {
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint64_t counter = 0;
};

// Everything besides the flat states that a resumed run needs to continue bit for bit.
struct TrainState {
  int64_t step = 0;             // optimizer steps completed
  int64_t schedule_step = 0;    // position in the learning-rate schedule
  int64_t tokens_seen = 0;
  int64_t loader_epoch = 0;     // data::LoaderState, which is independent of the world size
  int64_t loader_consumed = 0;
  std::map<std::string, RngState> rng;   // by use ("init", "dropout", "sample", ...)
  nlohmann::json config = nlohmann::json::object();  // the run's configuration
  int world = 1;                // ranks that wrote the checkpoint
  int zero_stage = 0;
  std::string precision = "fp32";
  nlohmann::json extra = nlohmann::json::object();   // free-form (e.g. best eval loss)
};

struct StateInfo {
  std::string name;  // "params", "exp_avg", "exp_avg_sq", "master"
  DType dtype = DType::f32;
  int64_t numel = 0;  // Ψ
};

struct PieceInfo {
  std::string state;
  Range range;                  // elements of the state
  int64_t offset = 0;           // bytes from the start of the shard file
  int64_t bytes = 0;            // range.size() * dtype size
  std::vector<uint64_t> block_hashes;  // xxh64 of each block_bytes slice of the piece
};

struct ShardInfo {
  int rank = 0;
  std::string file;             // relative to the step directory
  int64_t file_bytes = 0;
  std::vector<PieceInfo> pieces;
};

struct Manifest {
  int version = kManifestVersion;
  int64_t step = 0;
  int64_t block_bytes = 4 << 20;
  std::vector<TensorInfo> tensors;
  std::vector<StateInfo> states;
  std::vector<ShardInfo> shards;
  TrainState train;
  nlohmann::json save = nlohmann::json::object();  // how the save went (sizes, times)

  const StateInfo* find_state(const std::string& name) const;
  int64_t total_bytes() const;  // bytes of all shard files
};

nlohmann::json to_json(const TrainState& t);
TrainState train_state_from_json(const nlohmann::json& j);
nlohmann::json to_json(const ShardInfo& s);
ShardInfo shard_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::json to_json(const Manifest& m);
// Parses and checks the structure: known version, pieces inside their state, no overlap, every
// state covered exactly once. `where` names the file in errors. Throws CorruptCheckpoint.
Manifest manifest_from_json(const nlohmann::json& j, const std::string& where);

// Reads <dir>/manifest.json; throws CorruptCheckpoint naming the file and problem.
Manifest read_manifest(const std::string& dir);

// Throws ModelMismatch naming the first differing tensor when `expected` (this model's table)
// does not match the checkpoint's. An empty `expected` accepts any table.
void check_same_model(const Manifest& m, const std::vector<TensorInfo>& expected,
                      const std::string& dir);

std::string hex64(uint64_t v);

}  // namespace strata::ckpt
