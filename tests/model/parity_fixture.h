// The container gen_reference.py, llama_reference.py and gen_hf_fixtures.py write (tools/parity):
// "STRP", u32 version 1, u64 header length, a JSON header whose "tensors" give each tensor's
// name, shape and byte offset, then the raw little-endian f32 / i32 data. And the error
// measure of the parity tests: max |strata - reference| / max |reference|, the error relative
// to the tensor's own scale, so entries that happen to be near zero do not dominate.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "nlohmann/json.hpp"

namespace strata::model {

// One container, read whole.
struct Fixture {
  nlohmann::json header;
  std::map<std::string, std::vector<char>> raw;
  std::map<std::string, Shape> shape;

  explicit Fixture(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    STRATA_CHECK(f, "cannot open ", path);
    std::vector<char> blob((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    STRATA_CHECK(blob.size() >= 16 && std::memcmp(blob.data(), "STRP", 4) == 0, path,
                 ": bad magic");
    uint32_t version;
    uint64_t hlen;
    std::memcpy(&version, blob.data() + 4, 4);
    std::memcpy(&hlen, blob.data() + 8, 8);
    STRATA_CHECK(version == 1, path, ": version ", version, ", expected 1");
    STRATA_CHECK(16 + hlen <= blob.size(), path, ": truncated header");
    header = nlohmann::json::parse(blob.begin() + 16, blob.begin() + 16 + int64_t(hlen));
    const char* data = blob.data() + 16 + hlen;
    const uint64_t data_bytes = blob.size() - 16 - hlen;
    for (const auto& t : header["tensors"]) {
      const Shape s = t["shape"].get<Shape>();
      const uint64_t off = t["offset"].get<uint64_t>(), bytes = uint64_t(numel(s)) * 4;
      STRATA_CHECK(off + bytes <= data_bytes, path, ": tensor ", t["name"], " out of bounds");
      raw[t["name"]] = std::vector<char>(data + off, data + off + bytes);
      shape[t["name"]] = s;
    }
  }
  template <typename T>
  std::vector<T> get(const std::string& name) const {
    auto it = raw.find(name);
    STRATA_CHECK(it != raw.end(), "fixture has no tensor ", name);
    std::vector<T> v(it->second.size() / sizeof(T));
    std::memcpy(v.data(), it->second.data(), it->second.size());
    return v;
  }
};

inline double rel_err(const float* a, const std::vector<float>& b) {
  double d = 0, s = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    d = std::max(d, std::fabs(double(a[i]) - b[i]));
    s = std::max(s, std::fabs(double(b[i])));
  }
  return s == 0 ? d : d / s;
}

}  // namespace strata::model
