// The checkpoint manifest (manifest.json in each step directory): what a checkpoint holds and
// where. It names every global tensor (name, shape), every state (name, dtype), and for every
// shard file the chunks it stores: which box of which tensor, which flat range of that box
// (chunks.h), for which state, at which byte offset, with an xxHash64 per block of
// `block_bytes`, so a load can verify exactly the blocks it reads. It also carries the
// training state needed to resume and the layout that wrote it (world, tp, dp, pp with its
// schedule and virtual stages, cp, ep, ZeRO stage, precision).
//
// Versions. 2 (written now): chunks are boxes of global tensors, so any layout (tensor
// parallel included) can save and any other can load. 1 (read only): each piece was a range
// of the flat tp=1 state; it is converted on read into chunks of the tensors it crosses
// (whole-tensor boxes), so old checkpoints load into any layout.
//
// Two error kinds on read: CorruptCheckpoint (damaged or inconsistent files; a loader falls
// back to an older checkpoint) and ModelMismatch (a healthy checkpoint of another model; a
// loader stops, since every older one belongs to the same run and would not fit either).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ckpt/chunks.h"
#include "ckpt/ranges.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "nlohmann/json.hpp"

namespace strata::ckpt {

inline constexpr int kManifestVersion = 2;

class CorruptCheckpoint : public Error {
 public:
  using Error::Error;
};

class ModelMismatch : public Error {
 public:
  using Error::Error;
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
  int tp = 1;                   // tensor-parallel degree of the writer's layout
  int dp = 0;                   // data-parallel degree (0: world / tp)
  int pp = 1, cp = 1, ep = 1;   // pipeline, context and expert-parallel degrees (1 before they were saved)
  // The pipeline's schedule and model chunks per stage ("1f1b" and 1 before they were saved).
  std::string schedule = "1f1b";
  int virtual_stages = 1;
  int zero_stage = 0;
  std::string precision = "fp32";  // the states' working precision
  // --precision of the run: the states' precision, except under --pp, whose stages keep fp32
  // states under bf16 matmuls (before it was saved: `precision`).
  std::string run_precision = "fp32";
  nlohmann::json extra = nlohmann::json::object();   // free-form (e.g. best eval loss)
};

struct StateInfo {
  std::string name;  // "params", "exp_avg", "exp_avg_sq", "master"
  DType dtype = DType::f32;
  int64_t numel = 0;  // elements of all tensors (version 1: Ψ of the flat state)
  // Holds some tensors, each whole, and none of the others (Muon's "exp_avg_sq": AdamW's
  // tensors only). Recorded as "partial": true.
  bool partial = false;
};

// A stretch of one shard file: a chunk (version 2) or a flat range (version 1).
struct PieceInfo {
  std::string state;
  std::string tensor;            // version 2: the chunk's tensor, box and flat range
  std::vector<int64_t> offsets;
  Shape extents;
  Range flat;
  Range range;                   // version 1: elements of the flat state
  int64_t offset = 0;            // bytes from the start of the shard file
  int64_t bytes = 0;             // elements * dtype size
  std::vector<uint64_t> block_hashes;  // xxh64 of each block_bytes slice of the piece
  int64_t elements() const { return tensor.empty() ? range.size() : flat.size(); }
};

// A saved chunk resolved against the manifest: where its elements are.
struct Chunk {
  std::string state;
  int tensor = 0;            // index into Manifest::tensors
  std::vector<int64_t> offsets;
  Shape extents;
  Range flat;
  int shard = 0;             // index into Manifest::shards
  int piece = 0;             // index into that shard's pieces
  int64_t piece_elem = 0;    // element of the piece where the chunk starts
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
  // Derived on read: every chunk, and the sorted runs of each (state, tensor index).
  std::vector<Chunk> chunks;
  std::map<std::pair<std::string, int>, TensorRuns> runs;
  std::map<std::string, int> tensor_index;  // name -> index into tensors

  const StateInfo* find_state(const std::string& name) const;
  int find_tensor(const std::string& name) const;  // -1 when absent
  // "shard-00001-of-00002.bin, params h.0.attn.c_attn.weight[0:96, 0:32] elements 0..3072"
  std::string chunk_name(int chunk) const;
  int64_t total_bytes() const;  // bytes of all shard files
};

nlohmann::json to_json(const TrainState& t);
TrainState train_state_from_json(const nlohmann::json& j);
nlohmann::json to_json(const ShardInfo& s);
ShardInfo shard_from_json(const nlohmann::json& j, const std::string& where);
nlohmann::json to_json(const Manifest& m);
// Parses and checks the structure: known version, pieces inside their files, chunks inside
// their tensors, and every tensor of every state covered exactly once (no overlap, no gap).
// Resolves the chunks (converting version 1). `where` names the file. Throws CorruptCheckpoint.
Manifest manifest_from_json(const nlohmann::json& j, const std::string& where);

// Reads <dir>/manifest.json; throws CorruptCheckpoint naming the file and problem.
Manifest read_manifest(const std::string& dir);

// Throws ModelMismatch naming the first differing tensor when `expected` (this model's global
// table; tied views are ignored) does not match the checkpoint's names and shapes. An empty
// `expected` accepts any table.
void check_same_model(const Manifest& m, const std::vector<TensorInfo>& expected,
                      const std::string& dir);

std::string hex64(uint64_t v);

}  // namespace strata::ckpt
