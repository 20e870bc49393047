#include "data/tokenizer/bpe.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "core/files.h"

namespace strata::data {
namespace {

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the rest to 256 + n.
struct ByteMap {
  uint32_t to_cp[256];
  int16_t from_cp[512];
  ByteMap() {
    std::fill(std::begin(from_cp), std::end(from_cp), int16_t{-1});
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Decodes one code point at s[i]; an invalid or truncated sequence is one byte, cp = -1.
int32_t next_cp(std::string_view s, size_t i, size_t& len) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  len = 1;
  if (b0 < 0x80) return b0;
  const int n = b0 >= 0xF5 ? -1 : b0 >= 0xF0 ? 3 : b0 >= 0xE0 ? 2 : b0 >= 0xC2 ? 1 : -1;
  if (n < 0 || i + static_cast<size_t>(n) >= s.size()) return -1;
  int32_t cp = b0 & (0x3F >> n);
  for (int k = 1; k <= n; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (b & 0x3F);
  }
  const int32_t min_cp = n == 1 ? 0x80 : n == 2 ? 0x800 : 0x10000;
  if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
  len = static_cast<size_t>(n) + 1;
  return cp;
}

enum Class : uint8_t { kLetter, kNumber, kSpace, kOther };

Class classify(int32_t cp) {
  if (cp < 0) return kOther;
  if (cp < 0x80) {
    const char c = static_cast<char>(cp);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return kLetter;
    if (c >= '0' && c <= '9') return kNumber;
    if (c == ' ' || (c >= '\t' && c <= '\r')) return kSpace;
    return kOther;
  }
  const uint32_t mask = U_GET_GC_MASK(cp);
  if (mask & U_GC_L_MASK) return kLetter;
  if (mask & U_GC_N_MASK) return kNumber;
  if (u_isUWhiteSpace(cp)) return kSpace;
  return kOther;
}

// The length in bytes of the run of code points of class `c` starting at s[i].
size_t run_of(std::string_view s, size_t i, Class c) {
  size_t j = i, len = 0;
  while (j < s.size() && classify(next_cp(s, j, len)) == c) j += len;
  return j - i;
}

// 's|'t|'re|'ve|'m|'ll|'d: the length of a contraction at s[i], or 0.
size_t contraction(std::string_view s, size_t i) {
  if (s[i] != '\'' || i + 1 >= s.size()) return 0;
  const char a = s[i + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 < s.size()) {
    const char b = s[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

// The length of GPT-2's first matching alternative at s[i] (always >= 1).
size_t match_word(std::string_view s, size_t i) {
  if (size_t n = contraction(s, i)) return n;
  size_t len = 0;
  const Class c = classify(next_cp(s, i, len));
  if (c != kSpace) return run_of(s, i, c);  // \p{L}+, \p{N}+ or [^\s\p{L}\p{N}]+
  if (s[i] == ' ' && i + 1 < s.size()) {    // ' ?X+' for X the class after the space
    size_t len2 = 0;
    const Class next = classify(next_cp(s, i + 1, len2));
    if (next != kSpace) return 1 + run_of(s, i + 1, next);
  }
  // \s+(?!\S) leaves the last space of a run before a non-space; else \s+ takes the one.
  size_t j = i, last = i;
  while (j < s.size() && classify(next_cp(s, j, len)) == kSpace) {
    last = j;
    j += len;
  }
  if (j == s.size() || last == i) return j - i;
  return last - i;
}

// Llama 3's pattern (tiktoken's cl100k family), alternatives tried in order at s[i]:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,3} |
//    ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
bool is_newline(int32_t cp) { return cp == '\r' || cp == '\n'; }

size_t match_word_llama3(std::string_view s, size_t i) {
  if (s[i] == '\'' && i + 1 < s.size()) {  // contractions, any case
    const char a = char(std::tolower(static_cast<unsigned char>(s[i + 1])));
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 < s.size()) {
      const char b = char(std::tolower(static_cast<unsigned char>(s[i + 2])));
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
  }
  size_t len = 0;
  const int32_t cp = next_cp(s, i, len);
  const Class c = classify(cp);
  if (c == kLetter) return run_of(s, i, kLetter);
  if (c != kNumber && !is_newline(cp) && i + len < s.size()) {  // one leading non-letter
    size_t len2 = 0;
    if (classify(next_cp(s, i + len, len2)) == kLetter) return len + run_of(s, i + len, kLetter);
  }
  if (c == kNumber) {  // at most three digits
    size_t j = i;
    for (int k = 0; k < 3 && j < s.size() && classify(next_cp(s, j, len)) == kNumber; ++k) j += len;
    return j - i;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  size_t j = i;
  if (s[j] == ' ' && j + 1 < s.size() && classify(next_cp(s, j + 1, len)) == kOther) ++j;
  if (classify(next_cp(s, j, len)) == kOther) {
    j += run_of(s, j, kOther);
    while (j < s.size() && (s[j] == '\r' || s[j] == '\n')) ++j;
    return j - i;
  }
  // Whitespace from here on: '\s*[\r\n]+' takes the run up to its last newline.
  size_t end = i, last_newline = std::string_view::npos, last = i;
  while (end < s.size() && classify(next_cp(s, end, len)) == kSpace) {
    if (is_newline(static_cast<unsigned char>(s[end]))) last_newline = end;
    last = end;
    end += len;
  }
  if (last_newline != std::string_view::npos) return last_newline + 1 - i;
  // '\s+(?!\S)': leaves the last space before a non-space; '\s+' otherwise.
  if (end == s.size() || last == i) return end - i;
  return last - i;
}

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw std::runtime_error(where + ": " + what);
}

// Parses JSON, reporting a syntax error by file and line.
nlohmann::json parse_json(const std::string& path) {
  const std::string text = read_regular_file(path, "tokenizer file");
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    const size_t upto = std::min<size_t>(e.byte, text.size());
    const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(upto), '\n');
    fail(path + " line " + std::to_string(line), "malformed JSON (truncated or invalid)");
  }
}

// A vocabulary key in GPT-2's byte-to-unicode alphabet, back to its bytes.
std::string key_to_bytes(const std::string& key, const std::string& where) {
  std::string out;
  for (size_t i = 0, len = 0; i < key.size(); i += len) {
    const int32_t cp = next_cp(key, i, len);
    const int16_t b = cp >= 0 && cp < 512 ? byte_map().from_cp[cp] : int16_t{-1};
    if (b < 0) fail(where, "token " + quote_input(key) + " is not in the byte-level alphabet");
    out += static_cast<char>(b);
  }
  return out;
}

bool looks_special(const std::string& s) {
  return s.size() > 4 && s.compare(0, 2, "<|") == 0 && s.compare(s.size() - 2, 2, "|>") == 0;
}

}  // namespace

std::string byte_to_unicode(uint8_t b) { return utf8(byte_map().to_cp[b]); }

std::vector<std::string_view> BpeTokenizer::pretokenize(std::string_view text, Pattern p) {
  std::vector<std::string_view> words;
  for (size_t i = 0; i < text.size();) {
    const size_t n = p == Pattern::llama3 ? match_word_llama3(text, i) : match_word(text, i);
    words.push_back(text.substr(i, n));
    i += n;
  }
  return words;
}

void BpeTokenizer::add_token(const std::string& bytes, int32_t id, const std::string& file) {
  if (id < 0 || id > (1 << 24)) fail(file, "token id " + std::to_string(id) + " out of range");
  if (static_cast<size_t>(id) >= id_to_bytes_.size()) id_to_bytes_.resize(static_cast<size_t>(id) + 1);
  id_to_bytes_[static_cast<size_t>(id)] = bytes;
  bytes_to_id_.emplace(bytes, id);
  if (bytes.size() == 1) byte_id_[static_cast<uint8_t>(bytes[0])] = id;
}

void BpeTokenizer::add_merge(const std::string& a, const std::string& b, int32_t rank,
                             const std::string& where) {
  const auto ia = bytes_to_id_.find(a), ib = bytes_to_id_.find(b), im = bytes_to_id_.find(a + b);
  if (ia == bytes_to_id_.end() || ib == bytes_to_id_.end() || im == bytes_to_id_.end())
    fail(where, "merge does not match the vocabulary (a part or the merged token is missing)");
  const uint64_t key = (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
  merges_.emplace(key, (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(im->second));
}

BpeTokenizer BpeTokenizer::from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt) {
  BpeTokenizer t;
  const nlohmann::json vocab = parse_json(vocab_json);
  if (!vocab.is_object()) fail(vocab_json, "expected an object of token -> id");
  for (const auto& [key, id] : vocab.items()) {
    if (!id.is_number_integer()) fail(vocab_json, "token " + quote_input(key) + " has a non-integer id");
    t.add_token(key_to_bytes(key, vocab_json), id.get<int32_t>(), vocab_json);
    if (looks_special(key)) t.specials_.emplace_back(key, id.get<int32_t>());
  }
  for (int b = 0; b < 256; ++b)
    if (!t.bytes_to_id_.count(std::string(1, static_cast<char>(b))))
      fail(vocab_json, "byte " + std::to_string(b) + " has no token (not a byte-level vocabulary)");
  std::istringstream in(read_regular_file(merges_txt, "tokenizer file"));
  std::string line;
  int32_t rank = 0;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty() || (n == 1 && line.rfind("#version", 0) == 0)) continue;
    const std::string where = merges_txt + " line " + std::to_string(n);
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == line.size() || line.find(' ', sp + 1) != std::string::npos)
      fail(where, "expected two tokens separated by one space");
    t.add_merge(key_to_bytes(line.substr(0, sp), where), key_to_bytes(line.substr(sp + 1), where), rank++, where);
  }
  t.files_ = {vocab_json, merges_txt};
  return t;
}

BpeTokenizer BpeTokenizer::from_tokenizer_json(const std::string& path) {
  BpeTokenizer t;
  const nlohmann::json j = parse_json(path);
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) fail(path, "no \"model\" object");
  const auto& model = j["model"];
  const std::string type = model.value("type", std::string("(none)"));
  if (type != "BPE") fail(path, "unknown model type " + quote_input(type) + " (supported: BPE)");
  if (!j.contains("pre_tokenizer") || j["pre_tokenizer"].dump().find("ByteLevel") == std::string::npos)
    fail(path, "pre_tokenizer is not ByteLevel (only GPT-2-style byte-level BPE is supported)");
  // A Split step before ByteLevel brings a pattern of its own: Llama 3's is known; any other
  // would encode differently under either scanner, silently, so it is refused.
  if (const std::string pre = j["pre_tokenizer"].dump(); pre.find("\"Split\"") != std::string::npos) {
    static const std::string kLlama3 =
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    if (pre.find(nlohmann::json(kLlama3).dump()) == std::string::npos)
      fail(path, "pre_tokenizer splits by a pattern of its own (a \"Split\" step) that is not Llama 3's; "
                 "only GPT-2's and Llama 3's patterns are supported");
    t.pattern_ = Pattern::llama3;
  }
  t.ignore_merges_ = model.value("ignore_merges", false);
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail(path, "model has no \"vocab\" object");
  for (const auto& [key, id] : model["vocab"].items()) {
    if (!id.is_number_integer()) fail(path, "token " + quote_input(key) + " has a non-integer id");
    t.add_token(key_to_bytes(key, path), id.get<int32_t>(), path);
  }
  if (j.contains("added_tokens"))
    for (const auto& a : j["added_tokens"]) {
      const std::string content = a.at("content").get<std::string>();
      const int32_t id = a.at("id").get<int32_t>();
      t.add_token(content, id, path);
      t.specials_.emplace_back(content, id);
    }
  if (!model.contains("merges") || !model["merges"].is_array()) fail(path, "model has no \"merges\" array");
  int32_t rank = 0;
  for (const auto& m : model["merges"]) {
    const std::string where = path + " merge " + std::to_string(rank);
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos) fail(where, "expected two tokens separated by one space");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2) {
      a = m[0].get<std::string>(), b = m[1].get<std::string>();
    } else {
      fail(where, "expected \"a b\" or [a, b]");
    }
    t.add_merge(key_to_bytes(a, where), key_to_bytes(b, where), rank++, where);
  }
  t.files_ = {path};
  return t;
}

// A short word: rescan every adjacent pair, merge the lowest rank (the leftmost of equals),
// repeat. O(n^2), and the fastest for the few bytes of most words.
std::vector<int32_t> BpeTokenizer::merge_short(std::string_view word) const {
  std::vector<int32_t> parts(word.size());
  for (size_t i = 0; i < word.size(); ++i) parts[i] = byte_id_[static_cast<uint8_t>(word[i])];
  while (parts.size() > 1) {
    uint64_t best = std::numeric_limits<uint64_t>::max();
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const auto m = merges_.find((static_cast<uint64_t>(parts[i]) << 32) | static_cast<uint32_t>(parts[i + 1]));
      if (m != merges_.end() && m->second < best) best = m->second, at = i;
    }
    if (best == std::numeric_limits<uint64_t>::max()) break;
    parts[at] = static_cast<int32_t>(best & 0xFFFFFFFFu);
    parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  }
  return parts;
}

// A long word, in O(n log n): the same merges in the same order as merge_short. Symbols are a
// doubly linked list over the word's bytes (a symbol keeps the position of its first byte).
// Candidates (adjacent pairs that have a merge) wait in a priority queue keyed by (merge rank,
// left position): a min-heap of the ranks present, each rank with its candidates sorted by
// position when the rank comes up, so the long runs of one rank are scanned in order rather
// than popped one by one from a heap of n entries (which misses the cache at every level).
// A merge of rank r makes candidates with both neighbours, never of rank r itself (the
// merged token is longer than either part); one of a lower rank (a merge table whose parts
// are not made before they are used) comes first, so the scan of rank r stops and the rest
// of it goes back to the queue. Candidates of pairs that are gone are skipped when they come
// up: a pair is recorded by where it ends, and since symbols only grow, a live left symbol
// whose right neighbour still ends there is that same pair. Memory: 24 bytes a byte at most.
std::vector<int32_t> BpeTokenizer::merge_long(std::string_view word) const {
  if (word.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw std::length_error("BPE: a pre-token of " + std::to_string(word.size()) + " bytes is over 2 GiB");
  const auto n = static_cast<int32_t>(word.size());
  std::vector<int32_t> id(word.size()), next(word.size()), prev(word.size());
  for (int32_t i = 0; i < n; ++i) {
    id[i] = byte_id_[static_cast<uint8_t>(word[i])];
    next[i] = i + 1;  // n: none
    prev[i] = i - 1;
  }
  struct Candidate {
    int32_t left, end, merged;  // end: where the right symbol ends
  };
  std::unordered_map<uint32_t, std::vector<Candidate>> waiting;  // by rank
  std::vector<uint32_t> ranks;                                    // min-heap of waiting's keys
  // Queues the pair at `left` if it has a merge; returns its rank (or the largest rank).
  const auto queue = [&](int32_t left) {
    const int32_t right = next[left];
    const auto m = merges_.find((static_cast<uint64_t>(id[left]) << 32) | static_cast<uint32_t>(id[right]));
    if (m == merges_.end()) return std::numeric_limits<uint32_t>::max();
    const auto rank = static_cast<uint32_t>(m->second >> 32);
    auto& list = waiting[rank];
    if (list.empty()) {
      ranks.push_back(rank);
      std::push_heap(ranks.begin(), ranks.end(), std::greater<>());
    }
    list.push_back({left, next[right], static_cast<int32_t>(m->second & 0xFFFFFFFFu)});
    return rank;
  };
  for (int32_t i = 0; i + 1 < n; ++i) queue(i);
  while (!ranks.empty()) {
    std::pop_heap(ranks.begin(), ranks.end(), std::greater<>());
    const uint32_t rank = ranks.back();
    ranks.pop_back();
    std::vector<Candidate> run;
    run.swap(waiting[rank]);
    std::sort(run.begin(), run.end(), [](const Candidate& x, const Candidate& y) { return x.left < y.left; });
    for (size_t k = 0; k < run.size(); ++k) {
      const Candidate c = run[k];
      if (id[c.left] < 0 || next[c.left] == n || next[next[c.left]] != c.end) continue;  // gone
      id[c.left] = c.merged;
      id[next[c.left]] = -1;
      next[c.left] = c.end;
      if (c.end < n) prev[c.end] = c.left;
      uint32_t lowest = std::numeric_limits<uint32_t>::max();
      if (prev[c.left] >= 0) lowest = std::min(lowest, queue(prev[c.left]));
      if (c.end < n) lowest = std::min(lowest, queue(c.left));
      if (lowest < rank && k + 1 < run.size()) {  // the lower rank goes first
        auto& rest = waiting[rank];
        rest.assign(run.begin() + static_cast<std::ptrdiff_t>(k) + 1, run.end());
        ranks.push_back(rank);
        std::push_heap(ranks.begin(), ranks.end(), std::greater<>());
        break;
      }
    }
  }
  std::vector<int32_t> parts;
  for (int32_t i = 0; i < n; i = next[i]) parts.push_back(id[i]);
  return parts;
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) {
  if (auto hit = cache_.find(std::string(word)); hit != cache_.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  if (ignore_merges_)
    if (auto whole = bytes_to_id_.find(std::string(word)); whole != bytes_to_id_.end()) {
      out.push_back(whole->second);
      return;
    }
  std::vector<int32_t> parts = word.size() <= kShortWord ? merge_short(word) : merge_long(word);
  out.insert(out.end(), parts.begin(), parts.end());
  // Long words are rare in text and would each hold their whole length in the cache.
  if (cache_.size() < (1u << 20) && word.size() <= kMaxCachedWord) cache_.emplace(std::string(word), std::move(parts));
}

void BpeTokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = pattern_ == Pattern::llama3 ? match_word_llama3(text, i) : match_word(text, i);
    encode_word(text.substr(i, n), out);
    i += n;
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool allow_special) {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  size_t i = 0;
  while (allow_special && !specials_.empty() && i < text.size()) {
    size_t first = std::string_view::npos;
    const std::pair<std::string, int32_t>* which = nullptr;
    for (const auto& s : specials_) {
      const size_t at = text.find(s.first, i);
      if (at < first || (at == first && which && s.first.size() > which->first.size())) first = at, which = &s;
    }
    if (!which || first == std::string_view::npos) break;
    encode_ordinary(text.substr(i, first - i), out);
    out.push_back(which->second);
    i = first + which->first.size();
  }
  encode_ordinary(text.substr(i), out);
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (const int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= id_to_bytes_.size())
      throw std::runtime_error("decode: token id " + std::to_string(id) + " is outside the vocabulary of " +
                               std::to_string(id_to_bytes_.size()));
    out += id_to_bytes_[static_cast<size_t>(id)];
  }
  return out;
}

int32_t BpeTokenizer::special_id(std::string_view name) const {
  for (const auto& s : specials_)
    if (s.first == name) return s.second;
  return -1;
}

}  // namespace strata::data
