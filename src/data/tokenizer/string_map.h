// Strings -> V for the encoders' hot lookups (pieces by text, cached segments): open
// addressing with linear probing, the keys copied into one arena, the xxh3 hash of each key
// kept beside it so a probe compares bytes only on a hash match. Half full at most; keys are
// never empty (a slot with key_size 0 is free).
//
// Cost. One hash and, on average, about one probe per lookup; no allocation per entry.
#pragma once
#include <xxhash.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::data {

template <typename V>
class StringMap {
 public:
  static uint64_t hash(std::string_view key) { return XXH3_64bits(key.data(), key.size()); }

  const V* find(std::string_view key) const { return find(key, hash(key)); }
  const V* find(std::string_view key, uint64_t h) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      const Slot& s = slots_[i];
      if (s.key_size == 0) return nullptr;
      if (s.hash == h && s.key_size == key.size() && keys_.compare(s.key_at, s.key_size, key) == 0) return &s.value;
    }
  }
  // Adds `key` unless present (the first value stays); false when it was present.
  bool insert(std::string_view key, uint64_t h, const V& value) {
    if (key.empty() || find(key, h) != nullptr) return false;
    if (2 * (size_ + 1) > slots_.size()) grow();
    place(Slot{h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(key.size()), value});
    keys_.append(key);
    ++size_;
    return true;
  }
  bool insert(std::string_view key, const V& value) { return insert(key, hash(key), value); }
  size_t size() const { return size_; }
  size_t key_bytes() const { return keys_.size(); }
  void clear() {
    slots_.clear();
    keys_.clear();
    size_ = 0;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_at = 0, key_size = 0;
    V value{};
  };
  void place(const Slot& slot) {
    size_t i = slot.hash & (slots_.size() - 1);
    while (slots_[i].key_size != 0) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = slot;
  }
  void grow() {
    std::vector<Slot> old(slots_.empty() ? 64 : 2 * slots_.size());
    old.swap(slots_);
    for (const Slot& s : old)
      if (s.key_size != 0) place(s);
  }

  std::vector<Slot> slots_;
  std::string keys_;
  size_t size_ = 0;
};

}  // namespace strata::data
