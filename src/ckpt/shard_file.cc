#include "ckpt/shard_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/files.h"
#include "core/memory.h"

namespace strata::ckpt {

namespace {

struct RawHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint32_t rank;
  uint32_t world;
  int64_t step;
  int64_t file_bytes;
  uint8_t reserved[16];
  uint64_t hash;  // xxh64 of the 56 bytes before it
};
static_assert(sizeof(RawHeader) == kShardHeaderBytes);
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "shard files are little-endian");

}  // namespace

std::string shard_file_name(int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "shard-%05d-of-%05d.bin", rank, world);
  return buf;
}

ShardInfo write_shard_file(const std::string& path, int rank, int world, int64_t step,
                           const std::vector<PieceSource>& pieces, int64_t block_bytes,
                           const FaultInjection* faults) {
  ShardInfo info;
  info.rank = rank;
  int64_t at = kShardHeaderBytes;
  for (const PieceSource& p : pieces) {
    at = align64(at);
    info.pieces.push_back(p.info);
    info.pieces.back().offset = at;
    info.pieces.back().block_hashes.clear();
    at += p.info.bytes;
  }
  info.file_bytes = at;

  RawHeader h{};
  std::memcpy(h.magic, kShardMagic, 8);
  h.version = kShardVersion;
  h.header_bytes = kShardHeaderBytes;
  h.rank = uint32_t(rank);
  h.world = uint32_t(world);
  h.step = step;
  h.file_bytes = info.file_bytes;
  h.hash = XXH64(&h, offsetof(RawHeader, hash), 0);

  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create ", path, ": ", errno_text(errno));
  try {
    int64_t written = 0;
    static const char zeros[64] = {};
    write_all(fd, &h, sizeof h, path, &written, faults);
    for (size_t i = 0; i < pieces.size(); ++i) {
      PieceInfo& pi = info.pieces[i];
      write_all(fd, zeros, size_t(pi.offset - written), path, &written, faults);
      const char* src = static_cast<const char*>(pieces[i].data);
      for (int64_t b = 0; b < pi.bytes; b += block_bytes) {
        const int64_t n = std::min(block_bytes, pi.bytes - b);
        pi.block_hashes.push_back(XXH64(src + b, size_t(n), 0));
        write_all(fd, src + b, size_t(n), path, &written, faults);
      }
      // After the first piece, with more to come: a crash here leaves a partly written file.
      if (faults && i == 0) faults->point("shard_partial");
    }
    if (faults) faults->point("shard_written");
    if (::fsync(fd) != 0) fail("fsync ", path, ": ", errno_text(errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) fail("close ", path, ": ", errno_text(errno));
  return info;
}

ShardReader::ShardReader(const std::string& path, const ShardInfo& info, int world, int64_t step)
    : path_(path), info_(info) {
  // Opened without blocking and refused unless regular: a FIFO in place of a shard would
  // otherwise hang every reader (ls, verify, resume) in open(2).
  if (file_kind(path) == "missing") throw CorruptCheckpoint(cat(path, ": missing shard (No such file or directory)"));
  try {
    fd_ = open_regular_file(path, "shard");
  } catch (const Error& e) {
    throw CorruptCheckpoint(e.what());
  }
  struct stat st{};
  if (::fstat(fd_, &st) != 0) throw CorruptCheckpoint(cat(path, ": cannot stat (", errno_text(errno), ")"));
  if (int64_t(st.st_size) < info.file_bytes)
    throw CorruptCheckpoint(cat(path, ": truncated shard (", st.st_size, " of ", info.file_bytes, " bytes)"));
  if (int64_t(st.st_size) != info.file_bytes)
    throw CorruptCheckpoint(cat(path, ": shard has ", st.st_size, " bytes, manifest says ", info.file_bytes));
  RawHeader h{};
  pread_exact(&h, sizeof h, 0);
  if (std::memcmp(h.magic, kShardMagic, 8) != 0)
    throw CorruptCheckpoint(cat(path, ": wrong magic (not a strata shard file)"));
  if (h.version != kShardVersion)
    throw CorruptCheckpoint(cat(path, ": shard version ", h.version, ", this build reads ", kShardVersion));
  if (h.hash != XXH64(&h, offsetof(RawHeader, hash), 0))
    throw CorruptCheckpoint(cat(path, ": header checksum mismatch"));
  if (int(h.rank) != info.rank || int(h.world) != world || h.step != step ||
      h.file_bytes != info.file_bytes || h.header_bytes != kShardHeaderBytes)
    throw CorruptCheckpoint(cat(path, ": header says rank ", h.rank, " of ", h.world, ", step ", h.step, ", ",
                                h.file_bytes, " bytes; manifest says rank ", info.rank, " of ", world,
                                ", step ", step, ", ", info.file_bytes, " bytes"));
}

ShardReader::~ShardReader() {
  if (fd_ >= 0) ::close(fd_);
}

void ShardReader::pread_exact(void* dst, int64_t bytes, int64_t offset) {
  char* p = static_cast<char*>(dst);
  while (bytes > 0) {
    ssize_t r = ::pread(fd_, p, size_t(bytes), offset);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw CorruptCheckpoint(cat(path_, ": read error at byte ", offset, " (", errno_text(errno), ")"));
    if (r == 0) throw CorruptCheckpoint(cat(path_, ": truncated shard (end of file at byte ", offset, ")"));
    p += r;
    bytes -= r;
    offset += r;
  }
}

void ShardReader::read(const PieceInfo& piece, int64_t block_bytes, int64_t begin, int64_t end,
                       void* dst) {
  char* out = static_cast<char*>(dst);
  for (int64_t b = begin / block_bytes * block_bytes; b < end; b += block_bytes) {
    const int64_t n = std::min(block_bytes, piece.bytes - b);
    const int64_t lo = std::max(begin, b), hi = std::min(end, b + n);
    // A block wholly inside the wanted bytes is read straight into place; a partial one
    // goes through the scratch buffer so the whole block can be hashed.
    char* buf;
    const bool whole = lo == b && hi == b + n;
    if (whole) {
      buf = out + (b - begin);
    } else {
      scratch_.resize(size_t(block_bytes));
      buf = scratch_.data();
      if (scratch_at_ == piece.offset + b) {
        std::memcpy(out + (lo - begin), buf + (lo - b), size_t(hi - lo));
        continue;
      }
      scratch_at_ = -1;
    }
    pread_exact(buf, n, piece.offset + b);
    const size_t block = size_t(b / block_bytes);
    if (XXH64(buf, size_t(n), 0) != piece.block_hashes.at(block))
      throw CorruptCheckpoint(cat(path_, ": checksum mismatch in ", piece.state, " block ", block,
                                  " (bytes ", piece.offset + b, "..", piece.offset + b + n, ")"));
    if (!whole) {
      scratch_at_ = piece.offset + b;
      std::memcpy(out + (lo - begin), buf + (lo - b), size_t(hi - lo));
    }
  }
}

int64_t ShardReader::verify_all(int64_t block_bytes) {
  int64_t total = 0;
  std::vector<char> buf(size_t(std::min<int64_t>(block_bytes, 1 << 26)));
  for (const PieceInfo& p : info_.pieces) {
    for (int64_t b = 0; b < p.bytes; b += block_bytes) {
      const int64_t n = std::min(block_bytes, p.bytes - b);
      buf.resize(size_t(n) > buf.size() ? size_t(n) : buf.size());
      pread_exact(buf.data(), n, p.offset + b);
      const size_t block = size_t(b / block_bytes);
      if (XXH64(buf.data(), size_t(n), 0) != p.block_hashes.at(block))
        throw CorruptCheckpoint(cat(path_, ": checksum mismatch in ", p.state, " block ", block,
                                    " (bytes ", p.offset + b, "..", p.offset + b + n, ")"));
      total += n;
    }
  }
  return total;
}

}  // namespace strata::ckpt
