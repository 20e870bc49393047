#include "data/prepared.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/files.h"
#include "core/stats.h"
#include "data/dataset.h"
#include "data/token_file.h"
#include "data/tokenizer/tokenizer.h"

namespace strata::data {

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void write_manifest(const std::string& dir, const nlohmann::json& manifest) {
  atomic_write_file(dir + "/manifest.json", manifest.dump(2) + "\n");
}

bool is_prepared(const std::string& dir) {
  return file_kind(dir) == "a directory" && file_kind(dir + "/manifest.json") != "missing";
}

nlohmann::json read_manifest(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  const std::string text = read_regular_file(path, "manifest");
  const nlohmann::json m = nlohmann::json::parse(text, nullptr, false);
  STRATA_CHECK(!m.is_discarded() && m.is_object(), path, ": not JSON (truncated or damaged)");
  STRATA_CHECK(m.value("format", "") == kPreparedFormat, path, ": format is not ", kPreparedFormat);
  auto need = [&](const nlohmann::json& o, const char* key, bool number, const std::string& where) {
    STRATA_CHECK(o.contains(key) && (number ? o[key].is_number_integer() : !o[key].is_null()), path, ": ", where,
                 " has no ", number ? "integer " : "", "\"", key, "\"");
  };
  need(m, "tokens", true, "the manifest");
  need(m, "documents", true, "the manifest");
  need(m, "tokenizer", false, "the manifest");
  need(m["tokenizer"], "vocab", true, "\"tokenizer\"");
  need(m["tokenizer"], "document_token", true, "\"tokenizer\"");
  // Values in range, by the field: a vocabulary of -1, a document token outside it or a split
  // other than train and val would be read as something else (a "test" shard trained on).
  const int64_t vocab = m["tokenizer"]["vocab"].get<int64_t>();
  STRATA_CHECK(vocab >= 1 && vocab <= INT32_MAX, path, ": \"tokenizer\" \"vocab\" is ", vocab,
               " (expected a count of tokens in [1, 2^31))");
  const int64_t doc_token = m["tokenizer"]["document_token"].get<int64_t>();
  STRATA_CHECK(doc_token >= -1 && doc_token < vocab, path, ": \"tokenizer\" \"document_token\" is ", doc_token,
               " (expected a token id below the vocabulary of ", vocab, ", or -1 for none)");
  for (const char* key : {"tokens", "documents"})
    STRATA_CHECK(m[key].get<int64_t>() >= 0, path, ": \"", key, "\" is ", m[key].get<int64_t>(),
                 " (expected a count >= 0)");
  if (m.contains("token_bits"))
    STRATA_CHECK(m["token_bits"] == 16 || m["token_bits"] == 32, path, ": \"token_bits\" is ",
                 m["token_bits"].dump(), " (expected 16 or 32)");
  STRATA_CHECK(m.contains("shards") && m["shards"].is_array() && !m["shards"].empty(), path, ": lists no shards");
  for (const auto& s : m["shards"]) {
    STRATA_CHECK(s.is_object() && s.contains("file") && s["file"].is_string(), path, ": a shard without \"file\"");
    const std::string f = s["file"].get<std::string>();
    STRATA_CHECK(f.find('/') == std::string::npos && f != ".." && f != ".", path, ": shard name '", f,
                 "' is not a plain file name");
    need(s, "tokens", true, "shard " + f);
    need(s, "documents", true, "shard " + f);
    need(s, "split", false, "shard " + f);
    STRATA_CHECK(s["split"] == "train" || s["split"] == "val", path, ": shard ", f, " has \"split\" ",
                 s["split"].dump(), " (expected \"train\" or \"val\")");
    for (const char* key : {"tokens", "documents"})
      STRATA_CHECK(s[key].get<int64_t>() >= 0, path, ": shard ", f, " has \"", key, "\" ", s[key].get<int64_t>(),
                   " (expected a count >= 0)");
  }
  return m;
}

int manifest_token_bytes(const nlohmann::json& m) {
  return m.value("token_bits", 16) / 8;
}

void verify_prepared(const std::string& dir, const nlohmann::json& m, bool deep, PreparedStats* stats) {
  const int32_t doc_token = m["tokenizer"]["document_token"].get<int32_t>();
  const int width = manifest_token_bytes(m);
  // Ids a shard may hold: every uint16, or the tokenizer's vocabulary for uint32 shards.
  const int64_t ids = width == 2 ? 65536 : m["tokenizer"]["vocab"].get<int64_t>();
  std::vector<uint8_t> seen(deep ? size_t(ids) : 0, 0);
  std::vector<int64_t> doc_lengths;
  int64_t run = -1, total = 0, docs = 0;
  for (const auto& s : m["shards"]) {
    const std::string name = s["file"].get<std::string>(), path = dir + "/" + name;
    const std::string kind = file_kind(path);
    STRATA_CHECK(kind == "a regular file", "shard ", path, " listed in the manifest ",
                 kind == "missing" ? "is missing" : "is " + kind + ", not a file");
    MappedFile f(path);
    const int64_t want = s["tokens"].get<int64_t>();
    STRATA_CHECK(f.size() >= kBinHeaderBytes, "shard ", path, ": ", f.size(), " bytes, shorter than the ",
                 kBinHeaderBytes, "-byte .bin header (truncated)");
    int32_t head[3];
    std::memcpy(head, f.data(), sizeof head);
    const int head_width = bin_token_bytes(head[0], head[1]);
    STRATA_CHECK(head_width > 0, "shard ", path, ": not an llm.c .bin file (magic ", head[0], ", version ", head[1],
                 ")");
    STRATA_CHECK(head_width == width, "shard ", path, ": its header declares ", 8 * head_width,
                 "-bit tokens, the manifest ", 8 * width);
    STRATA_CHECK(head[2] == want, "shard ", path, ": its header counts ", head[2], " tokens, the manifest ", want);
    STRATA_CHECK(f.size() == kBinHeaderBytes + width * want, "shard ", path, ": ", f.size(), " bytes, expected ",
                 kBinHeaderBytes + width * want, " for ", want, " tokens of ", width,
                 " bytes (truncated or padded)");
    total += want;
    if (!deep) continue;
    const uint8_t* bytes = f.data() + kBinHeaderBytes;
    const std::string hash = hex64(XXH64(bytes, size_t(width * want), 0));
    STRATA_CHECK(hash == s.value("xxh64", ""), "shard ", path, ": its tokens hash to ", hash, ", the manifest says ",
                 s.value("xxh64", "(none)"), " (the shard was changed or damaged)");
    int64_t shard_docs = 0;
    for (int64_t i = 0; i < want; ++i) {
      uint32_t t = 0;
      if (width == 2) {
        uint16_t t16;
        std::memcpy(&t16, bytes + 2 * i, 2);
        t = t16;
      } else {
        std::memcpy(&t, bytes + 4 * i, 4);
      }
      STRATA_CHECK(t < uint32_t(ids), "shard ", path, ": token id ", t, " at token offset ", i,
                   " is >= the tokenizer's vocabulary of ", ids);
      seen[t] = 1;
      if (int64_t(t) == doc_token) {
        ++shard_docs;
        if (run > 0) doc_lengths.push_back(run);
        run = 0;
      }
      if (run >= 0) ++run;
    }
    STRATA_CHECK(shard_docs == s["documents"].get<int64_t>(), "shard ", path, ": holds ", shard_docs,
                 " documents, the manifest says ", s["documents"].get<int64_t>());
    docs += shard_docs;
  }
  STRATA_CHECK(total == m["tokens"].get<int64_t>(), dir, "/manifest.json: its shards hold ", total,
               " tokens, the manifest says ", m["tokens"].get<int64_t>());
  if (!deep || !stats) return;
  if (run > 0) doc_lengths.push_back(run);
  stats->tokens = total;
  stats->documents = docs;
  stats->distinct_tokens = std::count(seen.begin(), seen.end(), uint8_t{1});
  if (doc_lengths.empty()) return;
  const std::vector<double> lengths(doc_lengths.begin(), doc_lengths.end());
  stats->doc_min = *std::min_element(doc_lengths.begin(), doc_lengths.end());
  stats->doc_max = *std::max_element(doc_lengths.begin(), doc_lengths.end());
  stats->doc_mean = mean(lengths);
  stats->doc_median = median(lengths);
}

}  // namespace strata::data

namespace strata::data {
namespace {

// A prepared directory's split as a token stream that can show its samples as text.
class PreparedSource final : public TokenSource {
 public:
  PreparedSource(std::unique_ptr<TokenSource> base, std::shared_ptr<const Tokenizer> tok, std::string what,
                 int32_t doc_token)
      : base_(std::move(base)), tok_(std::move(tok)), what_(std::move(what)), doc_token_(doc_token) {}
  int64_t size() const override { return base_->size(); }
  int vocab() const override { return base_->vocab(); }
  void read(int64_t pos, int64_t n, int32_t* out) const override { base_->read(pos, n, out); }
  std::string describe() const override { return what_ + " " + base_->describe(); }
  bool can_decode() const override { return true; }
  std::string decode(const std::vector<int32_t>& ids) const override { return tok_->decode(ids); }
  int32_t document_token() const override { return doc_token_; }

 private:
  std::unique_ptr<TokenSource> base_;
  std::shared_ptr<const Tokenizer> tok_;
  std::string what_;
  int32_t doc_token_;
};

}  // namespace

Split open_prepared(const std::string& dir, double val_fraction, int vocab) {
  const nlohmann::json m = read_manifest(dir);
  verify_prepared(dir, m, /*deep=*/false);
  const int64_t tvocab = m["tokenizer"]["vocab"].get<int64_t>();
  STRATA_CHECK_SETTING(vocab == 0 || vocab >= tvocab, setting("data"), " ", dir,
                       ": its tokenizer has ", tvocab, " tokens but the model's vocabulary is ",
                       vocab, " (set ", setting("vocab"), " ", tvocab, ")");
  const int v = vocab > 0 ? vocab : int(tvocab);
  std::string tok_path = dir + "/tokenizer";
  const auto& files = m["tokenizer"].value("files", nlohmann::json::array());
  if (files.size() == 1) tok_path = dir + "/" + files[0].get<std::string>();  // tokenizer.json or .model
  std::shared_ptr<const Tokenizer> tok = open_tokenizer(tok_path);
  STRATA_CHECK_SETTING(hex64(tokenizer_hash(*tok)) == m["tokenizer"].value("xxh64", ""),
                       setting("data"), " ", dir,
                       ": the tokenizer files under tokenizer/ do not match the manifest's hash");
  std::vector<std::string> train, val;
  for (const auto& s : m["shards"])
    (s["split"] == "val" ? val : train).push_back(dir + "/" + s["file"].get<std::string>());
  STRATA_CHECK(!train.empty(), dir, "/manifest.json: lists no \"train\" shard");
  const std::string what = "prepared " + m["tokenizer"].value("xxh64", "") + ":";
  const int32_t doc_token = m["tokenizer"]["document_token"].get<int32_t>();
  Split out;
  if (!val.empty()) {
    out.train = std::make_unique<PreparedSource>(std::make_unique<FileStream>(train, v), tok, what, doc_token);
    out.val = std::make_unique<PreparedSource>(std::make_unique<FileStream>(val, v), tok, what, doc_token);
    return out;
  }
  auto whole = std::make_shared<const FileStream>(train, v);
  const int64_t total = whole->size(), held = int64_t(double(total) * val_fraction);
  out.train = std::make_unique<PreparedSource>(std::make_unique<SliceSource>(whole, 0, total - held, "train"), tok, what, doc_token);
  out.val = std::make_unique<PreparedSource>(std::make_unique<SliceSource>(whole, total - held, total, "val"), tok, what, doc_token);
  return out;
}

}  // namespace strata::data
