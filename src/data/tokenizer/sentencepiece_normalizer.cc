#include "data/tokenizer/sentencepiece_normalizer.h"

#include <algorithm>

#include "core/error.h"

namespace strata::data {
namespace {

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// A darts-clone unit: bit 31 marks a value unit (the other 31 bits are the value); otherwise
// bits 0-7 are the label, bit 8 says the node has a value child (a leaf, at offset ^ 0), and
// bits 10-31 are the offset to the children, shifted left by 8 when bit 9 is set.
bool has_leaf(uint32_t unit) { return (unit >> 8) & 1; }
uint32_t unit_value(uint32_t unit) { return unit & 0x7FFFFFFFu; }
uint32_t unit_label(uint32_t unit) { return unit & 0x800000FFu; }
uint32_t unit_offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

}  // namespace

PrefixMatcher::PrefixMatcher(const std::vector<std::string>& words) {
  for (const std::string& w : words) {
    if (w.empty()) continue;
    by_first_byte_[static_cast<uint8_t>(w[0])].push_back(w);
    empty_ = false;
  }
  for (auto& list : by_first_byte_)
    std::stable_sort(list.begin(), list.end(), [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
}

size_t PrefixMatcher::match(std::string_view s) const {
  if (s.empty()) return 0;
  for (const std::string& w : by_first_byte_[static_cast<uint8_t>(s[0])])
    if (s.substr(0, w.size()) == w) return w.size();
  return 0;
}

size_t valid_utf8_length(std::string_view s) {
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) return 1;
  const size_t n = b0 >= 0xF0 && b0 < 0xF8 ? 4 : b0 >= 0xE0 && b0 < 0xF0 ? 3 : b0 >= 0xC0 && b0 < 0xE0 ? 2 : 0;
  if (n == 0 || s.size() < n) return 0;
  uint32_t cp = b0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(s[k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  const uint32_t min_cp = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
  if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return 0;
  return n;
}

SentencePieceNormalizer::SentencePieceNormalizer(const SentencePieceModel& model, const std::string& path)
    : user_defined_([&] {
        std::vector<std::string> words;
        for (const auto& p : model.pieces)
          if (p.type == SentencePieceModel::PieceType::user_defined) words.push_back(p.text);
        return words;
      }()),
      add_dummy_prefix_(model.add_dummy_prefix),
      remove_extra_whitespaces_(model.remove_extra_whitespaces),
      escape_whitespaces_(model.escape_whitespaces),
      whitespace_as_suffix_(model.treat_whitespace_as_suffix) {
  const std::string& blob = model.precompiled_charsmap;
  if (blob.empty()) return;
  STRATA_CHECK(blob.size() > 4, path, ": malformed normalizer charsmap (", blob.size(), " bytes)");
  uint32_t trie_bytes = 0;
  for (int k = 0; k < 4; ++k) trie_bytes |= uint32_t(static_cast<uint8_t>(blob[k])) << (8 * k);
  STRATA_CHECK(trie_bytes < blob.size() - 4 && trie_bytes % 4 == 0 && trie_bytes > 0, path,
               ": malformed normalizer charsmap (a trie of ", trie_bytes, " bytes in ", blob.size() - 4, ")");
  units_.resize(trie_bytes / 4);
  for (size_t u = 0; u < units_.size(); ++u)
    for (int k = 0; k < 4; ++k) units_[u] |= uint32_t(static_cast<uint8_t>(blob[4 + 4 * u + k])) << (8 * k);
  replacements_ = blob.substr(4 + trie_bytes);
}

size_t SentencePieceNormalizer::longest_key(std::string_view s, std::string_view& replacement) const {
  if (units_.empty()) return 0;
  size_t longest = 0;
  uint32_t value = 0;
  uint32_t node = unit_offset(units_[0]);
  for (size_t i = 0; i < s.size(); ++i) {
    const auto label = static_cast<uint8_t>(s[i]);
    node ^= label;
    if (node >= units_.size()) break;
    const uint32_t unit = units_[node];
    if (unit_label(unit) != label) break;
    node ^= unit_offset(unit);
    if (node >= units_.size()) break;
    if (has_leaf(unit)) longest = i + 1, value = unit_value(units_[node]);
  }
  if (longest == 0) return 0;
  // A value past the strings (a damaged file) maps to nothing rather than reading outside.
  if (value >= replacements_.size()) {
    replacement = {};
  } else {
    const size_t end = replacements_.find('\0', value);
    replacement = std::string_view(replacements_).substr(value, end == std::string::npos ? end : end - value);
  }
  return longest;
}

std::string_view SentencePieceNormalizer::next(std::string_view s, size_t& consumed) const {
  if (!user_defined_.empty())
    if (const size_t n = user_defined_.match(s); n > 0) return s.substr(0, consumed = n);
  std::string_view replacement;
  if (const size_t n = longest_key(s, replacement); n > 0) {
    consumed = n;
    return replacement;
  }
  const size_t n = valid_utf8_length(s);
  if (n == 0) {
    consumed = 1;
    return kReplacementCharacter;
  }
  return s.substr(0, consumed = n);
}

void SentencePieceNormalizer::normalize(std::string_view text, std::string& out) const {
  out.clear();
  size_t consumed = 0;
  if (remove_extra_whitespaces_)
    while (!text.empty() && next(text, consumed) == " ") text.remove_prefix(consumed);
  if (text.empty()) return;
  const std::string_view space = this->space();
  if (add_dummy_prefix_ && !whitespace_as_suffix_) out.append(space);
  bool after_space = remove_extra_whitespaces_;
  while (!text.empty()) {
    std::string_view piece = next(text, consumed);
    text.remove_prefix(consumed);
    if (after_space)
      while (!piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
    if (!piece.empty()) {
      if (escape_whitespaces_) {
        for (const char c : piece)
          if (c == ' ')
            out.append(space);
          else
            out.push_back(c);
      } else {
        out.append(piece);
      }
      after_space = piece.back() == ' ';
    }
    if (!remove_extra_whitespaces_) after_space = false;
  }
  if (remove_extra_whitespaces_)
    while (out.size() >= space.size() && out.compare(out.size() - space.size(), space.size(), space) == 0)
      out.resize(out.size() - space.size());
  if (add_dummy_prefix_ && whitespace_as_suffix_) out.append(space);
}

}  // namespace strata::data
