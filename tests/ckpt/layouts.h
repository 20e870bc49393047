// Tensor-parallel layouts for the checkpoint tests, built by hand the way Megatron shards a
// GPT-2 block, and rank states whose every element is a known function of (state, step,
// tensor, global position). The global position of a box element is computed here from
// first principles (unravel over the box, ravel over the tensor), independently of chunks.h.
#pragma once
#include <string>
#include <vector>

#include "core/shard.h"
#include "helpers.h"

namespace ckpt_test {

inline bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Layout of tp rank r of t over `table` (tensors in table order, pieces consecutive):
//   wte, c_fc (weight, bias)          row blocks (vocab- and column-parallel), uneven if need be
//   c_attn (weight, bias)             three row blocks per rank: its heads of q, of k, of v
//   attn.c_proj / mlp.c_proj weight   column boxes (row-parallel)
//   everything else                   replicated: primary on tp rank 0 only
inline TensorLayout megatron_layout(const std::vector<TensorInfo>& table, int r, int t) {
  TensorLayout out;
  int64_t at = 0;
  auto add = [&](const TensorInfo& ti, std::vector<int64_t> off, Shape ext, bool primary) {
    out.push_back({ti.name, ti.shape, off, ext, at, primary});
    at += numel(ext);
  };
  auto part = [&](int64_t n, int k) { return n * k / t; };  // uneven when t does not divide n
  for (const TensorInfo& ti : table) {
    const Shape& s = ti.shape;
    std::vector<int64_t> zero(s.size(), 0);
    if (ends_with(ti.name, "c_attn.weight") || ends_with(ti.name, "c_attn.bias")) {
      const int64_t c = s[0] / 3;
      for (int j = 0; j < 3; ++j) {
        std::vector<int64_t> off = zero;
        Shape ext = s;
        off[0] = j * c + part(c, r);
        ext[0] = part(c, r + 1) - part(c, r);
        add(ti, off, ext, true);
      }
    } else if (ti.name == "wte" || ends_with(ti.name, "c_fc.weight") || ends_with(ti.name, "c_fc.bias")) {
      std::vector<int64_t> off = zero;
      Shape ext = s;
      off[0] = part(s[0], r);
      ext[0] = part(s[0], r + 1) - part(s[0], r);
      add(ti, off, ext, true);
    } else if (ends_with(ti.name, "c_proj.weight")) {
      std::vector<int64_t> off = zero;
      Shape ext = s;
      off[1] = part(s[1], r);
      ext[1] = part(s[1], r + 1) - part(s[1], r);
      add(ti, off, ext, true);
    } else {
      add(ti, zero, s, r == 0);
    }
  }
  return out;
}

// Global row-major position of element k (row-major within the box) of piece p.
inline int64_t global_pos(const TensorPiece& p, int64_t k) {
  int64_t g = 0, stride = 1;
  for (size_t j = p.extents.size(); j-- > 0;) {
    g += (p.offsets[j] + k % p.extents[j]) * stride;
    k /= p.extents[j];
    stride *= p.global_shape[j];
  }
  return g;
}

inline int tensor_index(const std::vector<TensorInfo>& table, const std::string& name) {
  for (size_t i = 0; i < table.size(); ++i)
    if (table[i].name == name) return int(i);
  return -1;
}

inline float tvalue(int state, int64_t step, int tensor, int64_t pos) {
  return float(((pos * 7 + tensor * 31 + state * 13 + step * 3) % 251) - 125) * 0.5f;
}

// The local flat state of a layout: element i holds the value of its global element.
template <typename ValueFn>
std::vector<float> local_state(const TensorLayout& layout, ValueFn&& value_of) {
  std::vector<float> out(size_t(layout_numel(layout)));
  for (const TensorPiece& p : layout)
    for (int64_t k = 0; k < p.numel(); ++k)
      out[size_t(p.local_offset + k)] = value_of(p.name, global_pos(p, k));
  return out;
}

// A mesh of tp × dp ranks, tp fastest; ZeRO `stage` shards each tp rank's flat space over dp.
struct Mesh {
  int tp = 1, dp = 1, stage = 0;
  int world() const { return tp * dp; }
  int tp_rank(int rank) const { return rank % tp; }
  int dp_rank(int rank) const { return rank / tp; }
  std::string str() const { return cat("tp ", tp, " dp ", dp, " zero ", stage); }
};

// What rank `rank` holds of state `s` (padding past Ψ_local included) and writes.
inline Range held_range(const Mesh& m, int rank, int s, int64_t psi) {
  const int64_t S = strata::shard_elems(psi, m.dp);
  const int d = m.dp_rank(rank);
  return zero_shards_state(m.stage, s == 0) ? Range{d * S, (d + 1) * S} : Range{0, psi};
}
inline Range write_range_of(const Mesh& m, int rank, int64_t psi) {
  const int64_t S = strata::shard_elems(psi, m.dp);
  const int d = m.dp_rank(rank);
  return intersect({d * S, (d + 1) * S}, {0, psi});
}

}  // namespace ckpt_test
