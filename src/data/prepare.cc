#include "data/prepare.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "core/error.h"
#include "core/files.h"
#include "core/staged_dir.h"
#include "data/prepared.h"
#include "data/token_file.h"
#include "data/tokenizer/tokenizer.h"

namespace strata::data {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

std::string sys_error(const std::string& path, const char* op) {
  return cat(path, ": ", op, " failed: ", std::strerror(errno));
}

bool is_jsonl(const std::string& path) {
  return path.size() > 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0;
}

}  // namespace

std::vector<std::string> corpus_files(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    const std::string kind = file_kind(in);
    if (kind == "a directory") {
      std::vector<std::string> found;
      for (const auto& e : fs::recursive_directory_iterator(in))
        if (e.is_regular_file()) found.push_back(e.path().string());
      std::sort(found.begin(), found.end());
      if (found.empty()) fail(cat("input ", in, ": the directory holds no files"));
      files.insert(files.end(), found.begin(), found.end());
    } else {
      require_regular_file(in, "input");
      files.push_back(in);
    }
  }
  return files;
}

void require_new_output_dir(const std::string& out) {
  STRATA_CHECK(!out.empty(), "output: empty path (-o \"\"); name a new directory");
  STRATA_CHECK(file_kind(out) == "missing", "output ", out, " already exists (", file_kind(out),
               "): choose a new directory");
}

std::string stage_output_dir(const std::string& out) {
  require_new_output_dir(out);
  return make_staging_dir(out, "partial", "output");
}

void commit_output_dir(const std::string& staged, const std::string& out) {
  commit_staging_dir(staged, out, false, "output");
}

void split_documents(const std::string& path, const std::string& text, const std::string& text_field,
                     DocSplit doc_split, std::vector<std::string>& docs) {
  if (is_jsonl(path)) {
    size_t line_no = 0;
    for (size_t i = 0; i < text.size();) {
      size_t end = text.find('\n', i);
      if (end == std::string::npos) end = text.size();
      ++line_no;
      const std::string_view line(text.data() + i, end - i);
      i = end + 1;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object())
        fail(cat(path, " line ", line_no, ": not a JSON object"));
      const auto f = j.find(text_field);
      if (f == j.end() || !f->is_string())
        fail_setting(cat(path, " line ", line_no, ": no string field \"", text_field, "\" (",
                         setting("text-field"), ")"));
      docs.push_back(f->get<std::string>());
    }
    return;
  }
  if (doc_split == DocSplit::file) {
    docs.push_back(text);
    return;
  }
  const std::string_view sep = doc_split == DocSplit::blank_line ? "\n\n" : "\n";
  size_t start = 0;
  for (size_t at = text.find(sep); at != std::string::npos; at = text.find(sep, start)) {
    docs.push_back(text.substr(start, at + sep.size() - start));
    start = at + sep.size();
  }
  if (start < text.size()) docs.push_back(text.substr(start));
}

namespace {

// One split's shards: tokens stream in, a shard closes at shard_tokens (header written,
// fsync'd) and is recorded with its token and document counts and the xxh64 of its tokens as
// stored. token_bytes 2 writes llm.c's uint16 format, 4 its uint32 one (token_file.h).
class ShardWriter {
 public:
  ShardWriter(std::string dir, std::string split, int64_t shard_tokens, int32_t doc_token, int token_bytes)
      : dir_(std::move(dir)), split_(std::move(split)), shard_tokens_(shard_tokens), doc_token_(doc_token),
        token_bytes_(token_bytes) {}
  ~ShardWriter() {
    if (fd_ >= 0) ::close(fd_);
    XXH64_freeState(hash_);
  }
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void add(const int32_t* t, int64_t n) {
    while (n > 0) {
      if (fd_ < 0) open_next();
      const int64_t take = std::min(n, shard_tokens_ - count_);
      const size_t at = buf_.size();
      buf_.resize(at + size_t(take * token_bytes_));
      for (int64_t i = 0; i < take; ++i) {
        if (token_bytes_ == 2) {
          const uint16_t v = uint16_t(t[i]);
          std::memcpy(buf_.data() + at + 2 * i, &v, 2);
        } else {
          const uint32_t v = uint32_t(t[i]);
          std::memcpy(buf_.data() + at + 4 * i, &v, 4);
        }
        docs_ += t[i] == doc_token_;
      }
      count_ += take, t += take, n -= take;
      if (buf_.size() >= (2u << 20)) flush();
      if (count_ == shard_tokens_) close_shard();
    }
  }
  void finish() {
    if (fd_ >= 0) close_shard();
  }
  const nlohmann::json& shards() const { return shards_; }

 private:
  void open_next() {
    name_ = cat(split_, "_", std::string(6 - std::min<size_t>(6, std::to_string(index_).size()), '0'), index_, ".bin");
    const std::string path = dir_ + "/" + name_;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail(sys_error(path, "open"));
    const std::vector<int32_t> header(kBinHeaderInts, 0);
    write_bytes(header.data(), header.size() * sizeof(int32_t));
    XXH64_reset(hash_, 0);
    count_ = docs_ = 0;
    ++index_;
  }
  void write_bytes(const void* p, size_t bytes) { write_fully(fd_, p, bytes, dir_ + "/" + name_); }
  void flush() {
    XXH64_update(hash_, buf_.data(), buf_.size());
    write_bytes(buf_.data(), buf_.size());
    buf_.clear();
  }
  void close_shard() {
    flush();
    const int32_t head[3] = {token_bytes_ == 2 ? kBinMagic : kBin32Magic,
                             token_bytes_ == 2 ? kBinVersion : kBin32Version, int32_t(count_)};
    const std::string path = dir_ + "/" + name_;
    if (::pwrite(fd_, head, sizeof head, 0) != ssize_t(sizeof head)) fail(sys_error(path, "write"));
    if (::fsync(fd_) != 0) fail(sys_error(path, "fsync"));
    ::close(fd_);
    fd_ = -1;
    shards_.push_back({{"file", name_}, {"split", split_}, {"tokens", count_}, {"documents", docs_},
                       {"xxh64", hex64(XXH64_digest(hash_))}});
  }

  std::string dir_, split_, name_;
  int64_t shard_tokens_;
  int32_t doc_token_;
  int token_bytes_;
  int fd_ = -1, index_ = 0;
  int64_t count_ = 0, docs_ = 0;
  std::vector<uint8_t> buf_;  // tokens as stored
  XXH64_state_t* hash_ = XXH64_createState();
  nlohmann::json shards_ = nlohmann::json::array();
};

// Encodes docs[i] into out[i] on `threads` threads, each over a contiguous range with its
// own tokenizer; every document starts with the document token.
void encode_batch(const std::vector<std::unique_ptr<Tokenizer>>& toks, const std::vector<std::string>& docs,
                  int32_t doc_token, std::vector<std::vector<int32_t>>& out) {
  out.assign(docs.size(), {});
  const size_t t = std::min(toks.size(), std::max<size_t>(1, docs.size()));
  std::vector<std::thread> pool;
  std::vector<std::exception_ptr> errors(t);
  for (size_t w = 0; w < t; ++w)
    pool.emplace_back([&, w] {
      try {
        for (size_t i = docs.size() * w / t; i < docs.size() * (w + 1) / t; ++i) {
          out[i].push_back(doc_token);
          toks[w]->encode(docs[i], out[i]);
        }
      } catch (...) {
        errors[w] = std::current_exception();
      }
    });
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

DocSplit parse_doc_split(const std::string& s) {
  if (s == "file") return DocSplit::file;
  if (s == "blank-line") return DocSplit::blank_line;
  if (s == "line") return DocSplit::line;
  fail_setting(cat(setting("doc-split"), " '", s, "': expected file, blank-line or line"));
}

nlohmann::json prepare(const PrepareOptions& o) {
  STRATA_CHECK(!o.inputs.empty(), "data prepare: no input files");
  STRATA_CHECK_SETTING(!(o.val_tokens > 0 && o.val_docs > 0), setting("val-tokens"), " and ",
                       setting("val-docs"), ": choose one");
  STRATA_CHECK_SETTING(o.val_tokens >= 0 && o.val_docs >= 0, setting("val-tokens"), " / ",
                       setting("val-docs"), " must be >= 0");
  STRATA_CHECK_SETTING(o.shard_tokens > 0 && o.shard_tokens <= INT32_MAX, setting("shard-tokens"),
                       " must be in [1, 2^31 - 1] (got ", o.shard_tokens,
                       "; a .bin header counts tokens in 32 bits)");
  require_new_output_dir(o.out);
  std::unique_ptr<Tokenizer> tok = open_tokenizer(o.tokenizer);
  // llm.c's uint16 shards whenever the ids fit them (GPT-2's and every older set's bytes stay
  // the same), its uint32 ones (Llama 3's 128,256 tokens) only when they do not.
  const int token_bytes = tok->vocab_size() <= 65536 ? 2 : 4;
  const int32_t doc_token = tok->document_token();
  STRATA_CHECK(doc_token >= 0, "tokenizer ", o.tokenizer,
               ": has no document token (<|endoftext|> or a beginning-of-sentence piece)");
  const std::vector<std::string> files = corpus_files(o.inputs);

  const std::string tmp = stage_output_dir(o.out);
  fs::create_directory(tmp + "/tokenizer");  // inside the directory just made

  PrepareProgress p;
  for (const std::string& f : files) p.bytes_total += int64_t(fs::file_size(f));
  const int threads = o.threads > 0 ? o.threads : std::max(1, int(std::thread::hardware_concurrency()));
  std::vector<std::unique_ptr<Tokenizer>> toks;
  for (int i = 0; i < threads; ++i) toks.push_back(tok->clone());
  ShardWriter val(tmp, "val", o.shard_tokens, doc_token, token_bytes),
      train(tmp, "train", o.shard_tokens, doc_token, token_bytes);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> docs;
  std::vector<std::vector<int32_t>> encoded;
  size_t batch_bytes = 0;
  auto drain = [&] {
    encode_batch(toks, docs, doc_token, encoded);
    for (const auto& e : encoded) {
      int64_t to_val = 0;
      if (o.val_tokens > 0) to_val = std::clamp<int64_t>(o.val_tokens - p.tokens, 0, int64_t(e.size()));
      if (o.val_docs > 0 && p.documents < o.val_docs) to_val = int64_t(e.size());
      val.add(e.data(), to_val);
      train.add(e.data() + to_val, int64_t(e.size()) - to_val);
      p.tokens += int64_t(e.size());
      ++p.documents;
    }
    docs.clear();
    batch_bytes = 0;
    p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o.progress) o.progress(p);
  };
  for (const std::string& f : files) {
    const std::string text = read_regular_file(f, "input");
    const size_t before = docs.size();
    split_documents(f, text, o.text_field, o.doc_split, docs);
    for (size_t i = before; i < docs.size(); ++i) batch_bytes += docs[i].size();
    p.bytes_done += int64_t(text.size());
    if (batch_bytes >= (8u << 20)) drain();
  }
  if (!docs.empty()) drain();
  STRATA_CHECK(p.documents > 0 && p.tokens > p.documents, "data prepare: the corpus (", files.size(),
               " file(s)) holds no text");
  val.finish();
  train.finish();
  STRATA_CHECK_SETTING(!train.shards().empty(),
                       "data prepare: every token went to the validation split (", p.tokens,
                       " tokens, ", setting("val-tokens"), " ", o.val_tokens, ", ",
                       setting("val-docs"), " ", o.val_docs, ")");

  nlohmann::json tfiles = nlohmann::json::array();
  for (const std::string& f : tok->files()) {
    const std::string name = fs::path(f).filename().string();
    atomic_write_file(tmp + "/tokenizer/" + name, read_regular_file(f, "tokenizer"));
    tfiles.push_back("tokenizer/" + name);
  }
  nlohmann::json shards = val.shards();
  for (const auto& s : train.shards()) shards.push_back(s);
  std::vector<std::string> doc_split_names = {"file", "blank-line", "line"};
  nlohmann::json manifest = {
      {"format", kPreparedFormat},
      {"tokenizer",
       {{"kind", tok->kind()},
        {"source", o.tokenizer},
        {"files", tfiles},
        {"xxh64", hex64(tokenizer_hash(*tok))},
        {"vocab", tok->vocab_size()},
        {"document_token", doc_token}}},
      {"inputs", o.inputs},
      {"doc_split", doc_split_names[size_t(o.doc_split)]},
      {"text_field", o.text_field},
      {"split", {{"val_tokens", o.val_tokens}, {"val_docs", o.val_docs}}},
      {"documents", p.documents},
      {"tokens", p.tokens},
      {"bytes", p.bytes_total},
      {"shards", shards}};
  if (token_bytes == 4) manifest["token_bits"] = 32;  // absent: uint16 (prepared.h)
  write_manifest(tmp, manifest);
  commit_output_dir(tmp, o.out);
  p.last = true;
  if (o.progress) o.progress(p);
  return manifest;
}

}  // namespace strata::data
