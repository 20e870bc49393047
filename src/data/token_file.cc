// Memory-mapped token files (format and cost in token_file.h).
#include "data/token_file.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/files.h"

namespace strata::data {

namespace fs = std::filesystem;

MappedFile::MappedFile(const std::string& path) : path_(path) {
  // Never blocks on a FIFO; refuses devices and directories (core/files.h).
  int fd = open_regular_file(path, "data file");
  struct stat st {};
  ::fstat(fd, &st);
  size_ = int64_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_t(size_), PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    STRATA_CHECK(p != MAP_FAILED, "cannot map data file ", path, ": ", std::strerror(err));
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_t(size_));
}

static FileFormat format_of(const std::string& path) {
  return fs::path(path).extension() == ".bin" ? FileFormat::bin : FileFormat::text;
}

int bin_token_bytes(int32_t magic, int32_t version) {
  if (magic == kBinMagic && version == kBinVersion) return 2;
  if (magic == kBin32Magic && version == kBin32Version) return 4;
  return 0;
}

namespace {

// Tokens of one width, read from the mapping (aligned: the header is 1024 bytes).
template <typename T>
uint32_t max_token(const uint8_t* bytes, int64_t n) {
  const T* t = reinterpret_cast<const T*>(bytes);
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max<uint32_t>(m, t[i]);
  return m;
}

template <typename T>
void widen(const uint8_t* bytes, int64_t n, int32_t* out) {
  const T* t = reinterpret_cast<const T*>(bytes);
  for (int64_t i = 0; i < n; ++i) out[i] = int32_t(t[i]);
}

uint32_t max_token(const uint8_t* bytes, int64_t n, int token_bytes) {
  if (token_bytes == 4) return max_token<uint32_t>(bytes, n);
  if (token_bytes == 2) return max_token<uint16_t>(bytes, n);
  return max_token<uint8_t>(bytes, n);
}

uint32_t token_at(const uint8_t* bytes, int64_t i, int token_bytes) {
  if (token_bytes == 4) return reinterpret_cast<const uint32_t*>(bytes)[i];
  if (token_bytes == 2) return reinterpret_cast<const uint16_t*>(bytes)[i];
  return bytes[i];
}

}  // namespace

FileStream::File FileStream::open_file(const std::string& p, FileFormat format) {
  File f;
  f.map = std::make_unique<MappedFile>(p);
  const int64_t bytes = f.map->size();
  if (format == FileFormat::text) {
    STRATA_CHECK(bytes > 0, "data file ", p, " is empty");
    f.count = bytes;
    f.tokens = f.map->data();
    return f;
  }
  STRATA_CHECK(bytes >= kBinHeaderBytes, "token file ", p, ": ", bytes, " bytes is shorter than the ",
               kBinHeaderBytes, "-byte llm.c header");
  int32_t header[3];
  std::memcpy(header, f.map->data(), sizeof header);
  STRATA_CHECK(header[0] == kBinMagic || header[0] == kBin32Magic, "token file ", p, ": bad magic ", header[0],
               " (expected ", kBinMagic, " or ", kBin32Magic, "; not an llm.c token file)");
  f.token_bytes = bin_token_bytes(header[0], header[1]);
  STRATA_CHECK(f.token_bytes > 0, "token file ", p, ": unsupported version ", header[1], " for magic ", header[0],
               header[0] == kBinMagic ? cat(" (expected ", kBinVersion, ": uint16 tokens)")
                                      : cat(" (expected ", kBin32Version, ": uint32 tokens)"));
  const int64_t count = header[2];
  const int64_t expect = kBinHeaderBytes + f.token_bytes * count;
  STRATA_CHECK(count >= 0 && bytes == expect, "token file ", p, ": header says ", count, " tokens (", expect,
               " bytes) but the file has ", bytes, " bytes", bytes < expect ? " (truncated)" : " (trailing bytes)");
  f.count = count;
  f.tokens = f.map->data() + kBinHeaderBytes;
  return f;
}

FileStream::FileStream(const std::vector<std::string>& paths, int vocab) {
  STRATA_CHECK(!paths.empty(), "no data files given");
  format_ = format_of(paths[0]);
  for (const std::string& p : paths) {
    STRATA_CHECK(format_of(p) == format_, "data files mix formats: ", paths[0], " and ", p,
                 " (all must be .bin, or all text)");
    File f = open_file(p, format_);
    f.first = total_;
    total_ += f.count;
    files_.push_back(std::move(f));
  }
  // The format's own vocabulary comes from the first file's width.
  const int own = format_ == FileFormat::text ? 256 : files_[0].token_bytes == 4 ? kLlama3Vocab : kGpt2Vocab;
  vocab_ = vocab > 0 ? vocab : own;
  for (const File& f : files_) validate_tokens(f);
}

// One pass over the mapping: the maximum first (vectorises), the offender only on failure.
void FileStream::validate_tokens(const File& f) const {
  if (format_ == FileFormat::text && vocab_ >= 256) return;
  if (max_token(f.tokens, f.count, f.token_bytes) < uint32_t(vocab_)) return;
  for (int64_t i = 0; i < f.count; ++i) {
    const uint32_t v = token_at(f.tokens, i, f.token_bytes);
    if (v >= uint32_t(vocab_)) {
      const int64_t byte = (format_ == FileFormat::bin ? kBinHeaderBytes : 0) + f.token_bytes * i;
      fail("token file ", f.map->path(), ": token id ", v, " at token offset ", i, " (byte ", byte,
           ") is >= vocab ", vocab_);
    }
  }
}

void FileStream::read(int64_t pos, int64_t n, int32_t* out) const {
  STRATA_CHECK(pos >= 0 && n >= 0 && pos + n <= total_, "read of tokens [", pos, ", ", pos + n,
               ") outside the ", total_, " tokens of ", describe());
  // The file holding `pos`: the last one whose first token is <= pos.
  auto it = std::upper_bound(files_.begin(), files_.end(), pos,
                             [](int64_t p, const File& f) { return p < f.first; });
  size_t fi = size_t(it - files_.begin()) - 1;
  while (n > 0) {
    const File& f = files_[fi];
    const int64_t local = pos - f.first;
    const int64_t take = std::min(n, f.count - local);
    const uint8_t* at = f.tokens + f.token_bytes * local;
    if (f.token_bytes == 4) widen<uint32_t>(at, take, out);
    else if (f.token_bytes == 2) widen<uint16_t>(at, take, out);
    else widen<uint8_t>(at, take, out);
    out += take;
    pos += take;
    n -= take;
    ++fi;
  }
}

std::string FileStream::describe() const {
  std::string s = files_[0].map->path();
  if (files_.size() > 1) s = cat(s, " .. ", files_.back().map->path(), " (", files_.size(), " files)");
  return cat(s, ", ", total_, " tokens");
}

SliceSource::SliceSource(std::shared_ptr<const TokenSource> base, int64_t begin, int64_t end,
                         std::string role)
    : base_(std::move(base)), begin_(begin), end_(end), role_(std::move(role)) {
  STRATA_CHECK(0 <= begin && begin <= end && end <= base_->size(), "slice [", begin, ", ", end,
               ") outside the ", base_->size(), " tokens of ", base_->describe());
}

void SliceSource::read(int64_t pos, int64_t n, int32_t* out) const {
  STRATA_CHECK(pos >= 0 && n >= 0 && pos + n <= size(), "read of tokens [", pos, ", ", pos + n,
               ") outside the ", size(), " tokens of ", describe());
  base_->read(begin_ + pos, n, out);
}

std::string SliceSource::describe() const {
  return cat(base_->describe(), " [", role_, ": tokens ", begin_, "..", end_, ")");
}

template <typename T>
static void write_bin_tokens(const std::string& path, const std::vector<T>& tokens, int32_t magic,
                             int32_t version) {
  STRATA_CHECK(tokens.size() <= size_t(INT32_MAX), "token file ", path, ": ", tokens.size(),
               " tokens exceed the int32 header count");
  int32_t header[kBinHeaderInts] = {magic, version, int32_t(tokens.size())};
  const std::vector<std::string_view> parts = {
      {reinterpret_cast<const char*>(header), sizeof header},
      {reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(T)}};
  atomic_write_file(path, parts);  // a device or FIFO target is refused, a full disk fails
}

void write_bin(const std::string& path, const std::vector<uint16_t>& tokens) {
  write_bin_tokens(path, tokens, kBinMagic, kBinVersion);
}

void write_bin(const std::string& path, const std::vector<uint32_t>& tokens) {
  write_bin_tokens(path, tokens, kBin32Magic, kBin32Version);
}

std::vector<std::string> resolve_files(const std::string& spec) {
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(spec, ec)) {
    for (const auto& e : fs::directory_iterator(spec, ec))
      if (e.is_regular_file() && e.path().extension() == ".bin") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    STRATA_CHECK(!files.empty(), "data directory ", spec, " holds no .bin token files");
    return files;
  }
  if (spec.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    int rc = ::glob(spec.c_str(), 0, nullptr, &g);
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) files.push_back(g.gl_pathv[i]);
    globfree(&g);
    STRATA_CHECK(!files.empty(), "data glob ", spec, " matches no files");
    std::sort(files.begin(), files.end());
    return files;
  }
  STRATA_CHECK(fs::exists(spec, ec), "data file ", spec, " not found (expected \"synthetic\", ",
               "a text file, a .bin token file, a directory of .bin shards, or a glob)");
  require_regular_file(spec, "data file");
  return {spec};
}

}  // namespace strata::data
