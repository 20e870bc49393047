// Shard files: one per rank per checkpoint, holding that rank's pieces of the flat states.
//
//   bytes 0..63   header: magic "STRATACK", u32 version, u32 header bytes (64), u32 rank,
//                 u32 world, i64 step, i64 file bytes, 16 reserved bytes, u64 xxh64 of bytes 0..55
//   then          the pieces, each starting at a 64-byte aligned offset, raw little-endian
//                 elements of the state's dtype
// The manifest records every piece's offset and an xxHash64 per block (block_bytes, 4 MiB by
// default), so a load reads and verifies only the blocks that overlap what it needs.
//
// Cost: writing hashes every byte once (xxh64 runs at several GB/s, well above disk speed);
// reading a range reads at most one partial block more at each end.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/fsutil.h"
#include "ckpt/manifest.h"

namespace strata::ckpt {

inline constexpr char kShardMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'C', 'K'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr int64_t kShardHeaderBytes = 64;

// File name of rank r's shard in a checkpoint written by `world` ranks.
std::string shard_file_name(int rank, int world);

// A piece to write: `info` describes it (state, chunk or range, bytes; the offset and
// checksums are filled in by the writer), `data` holds its info.bytes bytes.
struct PieceSource {
  PieceInfo info;
  const void* data = nullptr;
};

// Writes a complete shard file at `path` (the caller's temporary name), fsyncs and closes it.
// Returns the file's entry for the manifest (file name left empty). Throws naming the path.
ShardInfo write_shard_file(const std::string& path, int rank, int world, int64_t step,
                           const std::vector<PieceSource>& pieces, int64_t block_bytes,
                           const FaultInjection* faults);

// Reads and checks one shard file against its manifest entry: size, magic, version, header
// checksum, rank, world, step. Throws CorruptCheckpoint naming the file and the problem.
class ShardReader {
 public:
  ShardReader(const std::string& path, const ShardInfo& info, int world, int64_t step);
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  // Copies bytes [begin, end) of `piece` into dst after verifying every block they touch.
  // The last partly read block is kept, so reading a piece row by row (a column box) reads
  // and hashes each block once.
  void read(const PieceInfo& piece, int64_t block_bytes, int64_t begin, int64_t end, void* dst);
  // Verifies every block of every piece. Returns bytes checked.
  int64_t verify_all(int64_t block_bytes);

 private:
  void pread_exact(void* dst, int64_t bytes, int64_t offset);
  std::string path_;
  ShardInfo info_;
  int fd_ = -1;
  std::vector<char> scratch_;
  int64_t scratch_at_ = -1;  // file offset of the verified block in scratch_, -1: none
};

}  // namespace strata::ckpt
