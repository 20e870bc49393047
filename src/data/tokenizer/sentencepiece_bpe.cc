#include "data/tokenizer/sentencepiece_bpe.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace strata::data {
namespace {

using PieceType = SentencePieceModel::PieceType;
using Candidate = SentencePieceBpe::Scratch::Candidate;

// The length of the character a byte starts, by its high four bits alone, as the library
// splits normalized text (which is valid UTF-8: the normalizer replaced every invalid byte).
size_t character_length(char lead) {
  static constexpr uint8_t kLength[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLength[static_cast<uint8_t>(lead) >> 4];
}

// Heap order: the highest score on top, and of equal scores the leftmost.
bool lower_priority(const Candidate& a, const Candidate& b) {
  return a.score < b.score || (a.score == b.score && a.left > b.left);
}

std::vector<std::string> user_defined_pieces(const SentencePieceModel& model) {
  std::vector<std::string> words;
  for (const auto& p : model.pieces)
    if (p.type == PieceType::user_defined) words.push_back(p.text);
  return words;
}

}  // namespace

SentencePieceBpe::SentencePieceBpe(const SentencePieceModel& model, const std::string& path)
    : user_defined_(user_defined_pieces(model)),
      byte_fallback_(model.byte_fallback),
      space_(model.escape_whitespaces ? "\xE2\x96\x81" : " ") {
  segments_are_independent_ = true;
  for (size_t id = 0; id < model.pieces.size(); ++id) {
    const auto& p = model.pieces[id];
    scores_.push_back(p.score);
    types_.push_back(p.type);
    const bool mergeable = p.type == PieceType::normal || p.type == PieceType::user_defined || p.type == PieceType::unused;
    // The library keeps the first of two equal pieces (and refuses to load such a model).
    (mergeable ? mergeable_ : reserved_).insert(p.text, static_cast<int32_t>(id));
    if (!mergeable && !p.text.empty()) reserved_first_byte_[static_cast<uint8_t>(p.text[0])] = true;
    if (p.type == PieceType::unknown && unk_id_ < 0) unk_id_ = static_cast<int32_t>(id);
    if (p.type == PieceType::unused) has_unused_ = true;
    if (!mergeable) continue;
    for (size_t at = p.text.find(space_, 1); at != std::string::npos; at = p.text.find(space_, at + 1))
      if (at < space_.size() || p.text.compare(at - space_.size(), space_.size(), space_) != 0)
        segments_are_independent_ = false;
  }
  STRATA_CHECK(unk_id_ >= 0, path, ": SentencePiece model without an unknown piece");
  // Unused pieces split back by proposals made anywhere in the text; and a run of unknown
  // symbols, one unk, must not continue across a cut: a segment's first symbol ("▁...") is known.
  if (has_unused_ || types_[size_t(piece_to_id(space_))] == PieceType::unknown)
    segments_are_independent_ = false;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_id_[b] = piece_to_id(name);
  }
}

int32_t SentencePieceBpe::piece_to_id(std::string_view piece) const {
  if (!piece.empty() && reserved_first_byte_[static_cast<uint8_t>(piece[0])])
    if (const int32_t* id = reserved_.find(piece)) return *id;
  if (const int32_t* id = mergeable_.find(piece)) return *id;
  return unk_id_;
}

void SentencePieceBpe::push_candidate(std::string_view text, int32_t left, int32_t right, Scratch& s) const {
  if (left < 0 || right < 0) return;
  const auto& l = s.symbols[size_t(left)];
  const auto& r = s.symbols[size_t(right)];
  if (l.frozen || r.frozen) return;
  const std::string_view joined = text.substr(l.begin, l.size + r.size);
  const int32_t* id = mergeable_.find(joined);
  if (id == nullptr) return;
  s.heap.push_back({scores_[size_t(*id)], left, right, static_cast<uint32_t>(joined.size())});
  std::push_heap(s.heap.begin(), s.heap.end(), lower_priority);
  // The last proposal of an unused piece is how it splits back (step 3).
  if (types_[size_t(*id)] == PieceType::unused)
    s.proposed_from[joined] = {text.substr(l.begin, l.size), text.substr(r.begin, r.size)};
}

void SentencePieceBpe::emit(std::string_view symbol, std::vector<int32_t>& out, bool& after_unknown,
                            const Scratch& s) const {
  const int32_t id = piece_to_id(symbol);
  const PieceType type = types_[size_t(id)];
  if (type == PieceType::unused)
    if (const auto it = s.proposed_from.find(symbol); it != s.proposed_from.end()) {
      emit(it->second.first, out, after_unknown, s);
      emit(it->second.second, out, after_unknown, s);
      return;
    }
  const bool unknown = type == PieceType::unknown;
  if (unknown && byte_fallback_) {
    for (const char b : symbol) out.push_back(byte_id_[static_cast<uint8_t>(b)]);
  } else if (!unknown || !after_unknown) {
    out.push_back(id);  // a run of unknown symbols is one unk
  }
  after_unknown = unknown;
}

void SentencePieceBpe::encode(std::string_view text, std::vector<int32_t>& out, Scratch& s) const {
  if (text.empty()) return;
  s.symbols.clear();
  s.heap.clear();
  s.proposed_from.clear();
  for (size_t at = 0; at < text.size();) {
    size_t n = user_defined_.empty() ? 0 : user_defined_.match(text.substr(at));
    const bool frozen = n > 0;
    if (!frozen) n = std::min(text.size() - at, character_length(text[at]));
    const auto index = static_cast<int32_t>(s.symbols.size());
    s.symbols.push_back({static_cast<uint32_t>(at), static_cast<uint32_t>(n), index - 1,
                         at + n < text.size() ? index + 1 : -1, frozen});
    at += n;
  }
  for (size_t i = 1; i < s.symbols.size(); ++i)
    push_candidate(text, static_cast<int32_t>(i - 1), static_cast<int32_t>(i), s);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), lower_priority);
    const Candidate top = s.heap.back();
    s.heap.pop_back();
    auto& left = s.symbols[size_t(top.left)];
    auto& right = s.symbols[size_t(top.right)];
    // A candidate is stale once either side has merged since (sizes only grow).
    if (left.size == 0 || right.size == 0 || left.size + right.size != top.size) continue;
    left.size += right.size;
    left.next = right.next;
    if (right.next >= 0) s.symbols[size_t(right.next)].prev = top.left;
    right.size = 0;
    push_candidate(text, left.prev, top.left, s);
    push_candidate(text, top.left, left.next, s);
  }
  bool after_unknown = false;
  for (int32_t i = 0; i >= 0; i = s.symbols[size_t(i)].next)
    emit(text.substr(s.symbols[size_t(i)].begin, s.symbols[size_t(i)].size), out, after_unknown, s);
}

}  // namespace strata::data
