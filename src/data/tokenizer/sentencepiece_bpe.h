// SentencePiece BPE (model_type BPE: Llama 2, TinyLlama, `spm_train --model_type=bpe`) on
// normalized text, giving the ids libsentencepiece 0.1.97 gives.
//
// Terms. The *pieces* that merges may form are the normal, user-defined and unused ones;
// control, unknown and byte pieces are *reserved*: a symbol's id is looked up among the
// reserved first, then the pieces, else it is unk. Encoding a text:
//   1. initial *symbols*: a user-defined piece that starts at the position (longest; it is
//      *frozen*: never merged), else one UTF-8 character;
//   2. *candidates*: adjacent symbol pairs whose concatenation is a piece; the candidate with
//      the highest score is merged (ties: the leftmost), and the new symbol's pairs with its
//      neighbours become candidates; until none is left;
//   3. a symbol that is an unused piece is split back into the two symbols it was last
//      proposed from, recursively;
//   4. each symbol's id; an unknown symbol, with byte_fallback, becomes its bytes' <0xXX>
//      pieces, and without it a run of unknown symbols becomes one unk.
//
// Segments. When no piece holds a space ("▁") right after another character, no candidate
// ever spans the point before a "▁" that follows a non-space character: the text splits there
// into *segments* that encode independently, so a segment's ids can be cached
// (segments_are_independent()), provided "▁" is itself known (else a run of unknown symbols
// could continue across a cut). Unused pieces break this (step 3 reads proposals made
// anywhere in the text), so a model with them is encoded whole.
//
// Cost. O(n log n) for n symbols (a heap of candidates); a cache hit is one hash lookup.
// Threads. SentencePieceBpe is immutable; each thread passes its own Scratch.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizer/sentencepiece_model.h"
#include "data/tokenizer/sentencepiece_normalizer.h"
#include "data/tokenizer/string_map.h"

namespace strata::data {

class SentencePieceBpe {
 public:
  // The working memory of one encode, kept between calls.
  struct Scratch {
    struct Symbol {
      uint32_t begin, size;
      int32_t prev, next;
      bool frozen;
    };
    struct Candidate {
      float score;
      int32_t left, right;
      uint32_t size;
    };
    std::vector<Symbol> symbols;
    std::vector<Candidate> heap;
    std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> proposed_from;
  };

  // `model` must be a BPE model (read from `path`, named when it has no unknown piece).
  SentencePieceBpe(const SentencePieceModel& model, const std::string& path);
  // Appends the ids of normalized text.
  void encode(std::string_view normalized, std::vector<int32_t>& out, Scratch& scratch) const;
  bool segments_are_independent() const { return segments_are_independent_; }
  // The string segments start with ("▁", or " " when the model does not escape spaces).
  const std::string& space() const { return space_; }

 private:
  int32_t piece_to_id(std::string_view piece) const;
  void push_candidate(std::string_view text, int32_t left, int32_t right, Scratch& scratch) const;
  // Appends a final symbol's ids; `after_unknown`: the symbol before it was unknown.
  void emit(std::string_view symbol, std::vector<int32_t>& out, bool& after_unknown, const Scratch& scratch) const;

  std::vector<float> scores_;  // by id
  std::vector<SentencePieceModel::PieceType> types_;
  StringMap<int32_t> mergeable_, reserved_;
  bool reserved_first_byte_[256] = {};  // skips the reserved lookup for most symbols
  PrefixMatcher user_defined_;
  int32_t unk_id_ = -1;
  int32_t byte_id_[256] = {};
  bool byte_fallback_ = false;
  bool has_unused_ = false;
  bool segments_are_independent_ = false;
  std::string space_;
};

// Segment -> ids for one tokenizer (one thread), the ids in one arena. Emptied when it holds
// `max_entries`, so memory stays bounded on any corpus (one with fewer repeats than that
// gains little from a cache anyway).
class SegmentCache {
 public:
  static constexpr size_t kMaxKey = 64;  // longer segments are rare and encoded each time
  explicit SegmentCache(size_t max_entries = size_t{1} << 19) : max_entries_(max_entries) {}
  static uint64_t hash(std::string_view key) { return StringMap<IdRange>::hash(key); }

  // Appends the ids cached for `key` (`hash` its hash()); false when it is not cached.
  bool find(std::string_view key, uint64_t hash, std::vector<int32_t>& out) const {
    const IdRange* r = ranges_.find(key, hash);
    if (r == nullptr) return false;
    out.insert(out.end(), ids_.begin() + r->at, ids_.begin() + r->at + r->size);
    return true;
  }
  void insert(std::string_view key, uint64_t hash, const int32_t* ids, size_t n) {
    if (ranges_.size() >= max_entries_) {
      ranges_.clear();
      ids_.clear();
    }
    if (ranges_.insert(key, hash, IdRange{static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(n)}))
      ids_.insert(ids_.end(), ids, ids + n);
  }
  size_t size() const { return ranges_.size(); }

 private:
  struct IdRange {
    uint32_t at, size;
  };
  size_t max_entries_;
  StringMap<IdRange> ranges_;
  std::vector<int32_t> ids_;
};

}  // namespace strata::data
