// SentencePiece's normalizer, as libsentencepiece 0.1.97 applies it before encoding.
//
// Terms. The *charsmap* (NormalizerSpec.precompiled_charsmap, compiled by spm_train from a
// rule such as nmt_nfkc) is a little-endian uint32 byte count, a darts-clone double-array trie
// of that many bytes whose keys are UTF-8 source strings, then NUL-terminated replacement
// strings that the trie's values point into. At each position the normalizer takes, in order:
//   1. the longest *user-defined piece* that starts there, unchanged (never normalized);
//   2. else the longest trie key that starts there, replaced by its string;
//   3. else one UTF-8 character unchanged, or, for a byte that starts no valid character,
//      U+FFFD in its place (one byte consumed).
// Around that: with remove_extra_whitespaces, leading pieces that normalize to " " are
// dropped, a piece's leading spaces are dropped after a space, and trailing spaces are
// dropped; with add_dummy_prefix one space is put in front (behind, when the model treats
// whitespace as a suffix); with escape_whitespaces every space becomes U+2581 ("▁").
// Identity normalization (Llama 2's) is an empty charsmap: only steps 1 and 3.
//
// Cost. One trie walk per position, as deep as the longest key that matches there.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer/sentencepiece_model.h"

namespace strata::data {

// Longest-prefix matching of a set of strings (the user-defined pieces: few, so a list per
// first byte, longest first).
class PrefixMatcher {
 public:
  explicit PrefixMatcher(const std::vector<std::string>& words);
  bool empty() const { return empty_; }
  // The length of the longest word that `s` starts with, or 0.
  size_t match(std::string_view s) const;

 private:
  std::vector<std::string> by_first_byte_[256];
  bool empty_ = true;
};

// The length of the valid UTF-8 character at the start of `s`, or 0 when `s` starts with a
// byte that begins none (a stray continuation byte, an overlong form, a surrogate, a code
// point past U+10FFFF, or a truncated sequence).
size_t valid_utf8_length(std::string_view s);

class SentencePieceNormalizer {
 public:
  // Throws naming `path` when the charsmap is malformed.
  SentencePieceNormalizer(const SentencePieceModel& model, const std::string& path);
  // Replaces `out` with the normalized `text`.
  void normalize(std::string_view text, std::string& out) const;
  // The string spaces become in the normalized text: "▁", or " " without escaping.
  std::string_view space() const { return escape_whitespaces_ ? std::string_view("\xE2\x96\x81") : " "; }

 private:
  // The normalized form of the piece at the start of `s` and how many bytes of `s` it consumes.
  std::string_view next(std::string_view s, size_t& consumed) const;
  // The longest charsmap key at the start of `s` (0 if none) and its replacement.
  size_t longest_key(std::string_view s, std::string_view& replacement) const;

  PrefixMatcher user_defined_;
  std::vector<uint32_t> units_;  // the double array
  std::string replacements_;
  bool add_dummy_prefix_, remove_extra_whitespaces_, escape_whitespaces_, whitespace_as_suffix_;
};

}  // namespace strata::data
