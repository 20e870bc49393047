// Token files, memory-mapped: byte-level text (one token per byte, vocab 256) and llm.c .bin
// shards. Several files (a directory or a glob) form one stream, in name order.
//
// llm.c .bin formats (its dev/data/data_common.py): a header of 256 little-endian int32 --
// [0] magic, [1] version, [2] token count, the rest 0 -- then `count` tokens, whose width the
// magic and version give: 20240520 version 1, uint16 (llm.c's "gpt-2"); 20240801 version 7,
// uint32 (its "llama-3", for vocabularies past 65,536). On open every file is checked: header,
// file size = 1024 + width * count, and every token < vocab (one pass over the mapped file at
// memory speed, so a bad token is reported before training starts, naming the file, token
// offset and value). Files of both widths may form one stream.
//
// Cost. Opening maps each file and scans it once; read() copies (and widens) tokens from the
// mapping, touching only the pages it reads. No locks: reads are safe from any thread.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace strata::data {

constexpr int32_t kBinMagic = 20240520;  // uint16 tokens
constexpr int32_t kBinVersion = 1;
constexpr int32_t kBin32Magic = 20240801;  // uint32 tokens
constexpr int32_t kBin32Version = 7;
constexpr int64_t kBinHeaderInts = 256;
constexpr int64_t kBinHeaderBytes = kBinHeaderInts * 4;
constexpr int kGpt2Vocab = 50257;
constexpr int kLlama3Vocab = 128256;

// The bytes per token that a header's magic and version declare (2 or 4), or 0 when they are
// not one of llm.c's formats.
int bin_token_bytes(int32_t magic, int32_t version);

// A read-only memory mapping of a whole file.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  int64_t size_ = 0;
};

enum class FileFormat : uint8_t { text, bin };

// One or more token files of one format as a single stream.
class FileStream : public TokenSource {
 public:
  // vocab: tokens must be < vocab (0 = the format's own, by the first file: 256 text, 50257
  // for uint16 .bin, 128256 for uint32 .bin).
  FileStream(const std::vector<std::string>& paths, int vocab);
  int64_t size() const override { return total_; }
  int vocab() const override { return vocab_; }
  void read(int64_t pos, int64_t n, int32_t* out) const override;
  std::string describe() const override;
  FileFormat format() const { return format_; }
  bool is_text() const override { return format_ == FileFormat::text; }
  int num_files() const { return int(files_.size()); }

 private:
  struct File {
    std::unique_ptr<MappedFile> map;
    int64_t first = 0, count = 0;  // tokens [first, first + count) of the stream
    const uint8_t* tokens = nullptr;
    int token_bytes = 1;  // 1 text, 2 or 4 .bin
  };
  static File open_file(const std::string& path, FileFormat format);
  void validate_tokens(const File& f) const;
  FileFormat format_;
  int vocab_;
  std::vector<File> files_;
  int64_t total_ = 0;
};

// Tokens [begin, end) of a shared source (the training or validation part of a file).
class SliceSource : public TokenSource {
 public:
  SliceSource(std::shared_ptr<const TokenSource> base, int64_t begin, int64_t end,
              std::string role);
  int64_t size() const override { return end_ - begin_; }
  int vocab() const override { return base_->vocab(); }
  void read(int64_t pos, int64_t n, int32_t* out) const override;
  std::string describe() const override;
  bool is_text() const override { return base_->is_text(); }

 private:
  std::shared_ptr<const TokenSource> base_;
  int64_t begin_, end_;
  std::string role_;
};

// Writes an llm.c .bin file: uint16 tokens as version 1, uint32 tokens as version 7 (tests,
// benchmarks, tools). Throws naming the path.
void write_bin(const std::string& path, const std::vector<uint16_t>& tokens);
void write_bin(const std::string& path, const std::vector<uint32_t>& tokens);

// The files a spec names: a directory's *.bin files, a glob's matches (both sorted by name),
// or the file itself. Throws when nothing matches.
std::vector<std::string> resolve_files(const std::string& spec);

}  // namespace strata::data
