// FNV-1a-64 of token ids as little-endian uint32: the hash tools/tokenizer/*.js print, so a
// test holds a whole encoding to the reference encoders' in one number.
#pragma once
#include <cstdint>
#include <vector>

namespace strata::data {

inline uint64_t fnv1a64(const std::vector<int32_t>& ids) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const int32_t id : ids)
    for (int k = 0; k < 4; ++k) {
      h ^= (static_cast<uint32_t>(id) >> (8 * k)) & 0xFF;
      h *= 0x100000001b3ull;
    }
  return h;
}

}  // namespace strata::data
