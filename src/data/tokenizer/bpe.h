// Byte-level BPE tokenizer (GPT-2 family), loaded from Hugging Face files: `vocab.json` +
// `merges.txt`, or one `tokenizer.json` (model type "BPE", byte-level pre-tokenizer).
//
// Terms. Text is split into *words* by GPT-2's pre-tokenizer pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (a hand-written scanner: std::regex has no \p; Unicode categories from ICU). Each word's
// bytes start as one token per byte; the adjacent pair with the lowest merge *rank* is merged
// until none is in the merge table. Special (added) tokens such as <|endoftext|> are matched
// before pre-tokenization when encode() is asked to allow them.
//
// Invalid UTF-8. Byte-level BPE works on bytes, so an invalid byte is kept: it forms a
// one-byte code point of the "other" class (neither letter, number nor space) and encodes
// to its byte token; decode() gives the same bytes back.
//
// Cost. A word of n bytes is merged in O(n log n) (bpe.cc, merge_long: a priority queue of
// candidate pairs by rank and position over a linked list of symbols), so a pre-token of
// megabytes (a run of one byte, a line of '=') costs what its length says; words of up to
// kShortWord bytes, most of them, take the plain O(n^2) rescan, faster at that size. A cache
// of word -> tokens makes repeated words (up to kMaxCachedWord bytes) one hash lookup.
// encode() is not thread-safe (the cache); use one tokenizer per thread.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizer/tokenizer.h"

namespace strata::data {

class BpeTokenizer final : public Tokenizer {
 public:
  // Throws std::runtime_error naming the file and line of the first defect.
  static BpeTokenizer from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt);
  static BpeTokenizer from_tokenizer_json(const std::string& path);

  // allow_special: added tokens in the text become their ids; otherwise they are plain text.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = false);
  void encode(std::string_view text, std::vector<int32_t>& out) override { encode_ordinary(text, out); }
  std::string decode(const std::vector<int32_t>& ids) const override;
  // The id of an added/special token by name, or -1.
  int32_t special_id(std::string_view name) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_bytes_.size()); }
  int32_t document_token() const override { return special_id("<|endoftext|>"); }
  std::string kind() const override { return "bpe"; }
  std::unique_ptr<Tokenizer> clone() const override { return std::make_unique<BpeTokenizer>(*this); }
  const std::string& token_bytes(int32_t id) const { return id_to_bytes_.at(id); }

  // The pre-tokenizer's pattern: GPT-2's, or Llama 3's (tiktoken's cl100k family, chosen by a
  // tokenizer.json whose Split step has exactly that regex).
  enum class Pattern : uint8_t { gpt2, llama3 };
  Pattern pattern() const { return pattern_; }
  // The words of the pre-tokenizer (exposed for tests).
  static std::vector<std::string_view> pretokenize(std::string_view text, Pattern p = Pattern::gpt2);

 private:
  void add_token(const std::string& bytes, int32_t id, const std::string& file);
  void add_merge(const std::string& a, const std::string& b, int32_t rank, const std::string& where);
  void encode_word(std::string_view word, std::vector<int32_t>& out);
  std::vector<int32_t> merge_short(std::string_view word) const;
  std::vector<int32_t> merge_long(std::string_view word) const;
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out);

  std::vector<std::string> id_to_bytes_;
  std::unordered_map<std::string, int32_t> bytes_to_id_;
  int32_t byte_id_[256] = {};
  // (left id << 32 | right id) -> (rank << 32 | merged id)
  std::unordered_map<uint64_t, uint64_t> merges_;
  std::vector<std::pair<std::string, int32_t>> specials_;
  static constexpr size_t kShortWord = 32;  // bytes: merge_short up to here, faster there (measured)
  static constexpr size_t kMaxCachedWord = 256;
  std::unordered_map<std::string, std::vector<int32_t>> cache_;
  Pattern pattern_ = Pattern::gpt2;
  bool ignore_merges_ = false;  // a word that is itself a token is taken whole (Llama 3)
};

// GPT-2's reversible map of bytes to printable code points (as UTF-8), used in vocab files.
std::string byte_to_unicode(uint8_t b);

}  // namespace strata::data
