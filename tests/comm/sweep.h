// The collective sweep shared by the thread-world tests and the multi-process worker
// (shm processes and mpi): every collective x dtype x count (including 0, 1 and counts
// that do not divide by the group size), in place and out of place, against a
// straightforward reference computed here element by element.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "comm/process_group.h"
#include "core/dtype.h"
#include "core/error.h"

namespace strata::comm::testing {

inline const std::vector<DType> kAllDTypes = {DType::f32, DType::bf16, DType::f64,
                                              DType::i32, DType::i64,  DType::u8};

// Small integers: exact in every dtype, in every summation order; negative where the type
// allows so max/min see signs.
inline double value(int rank, size_t i, DType t) {
  int v = int((size_t(rank) * 5 + i * 3 + 1) % 11);
  return t == DType::u8 ? double(v) : double(v - 5);
}

inline void put(void* p, size_t i, DType t, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = float(v); break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(float(v)); break;
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::i32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
    case DType::i64: static_cast<int64_t*>(p)[i] = int64_t(v); break;
    case DType::u8: static_cast<uint8_t*>(p)[i] = uint8_t(v); break;
  }
}

inline double get(const void* p, size_t i, DType t) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::i32: return static_cast<const int32_t*>(p)[i];
    case DType::i64: return double(static_cast<const int64_t*>(p)[i]);
    case DType::u8: return static_cast<const uint8_t*>(p)[i];
  }
  return 0;
}

// The reference reduction of element i over n ranks, rounded as the dtype rounds.
inline double reference(size_t i, int n, DType t, ReduceOp op) {
  double acc = value(0, i, t);
  for (int r = 1; r < n; ++r) {
    double v = value(r, i, t);
    if (op == ReduceOp::max) acc = std::max(acc, v);
    else if (op == ReduceOp::min) acc = std::min(acc, v);
    else acc += v;
  }
  if (op != ReduceOp::avg) return acc;
  switch (t) {
    case DType::f32: return double(float(acc) / float(n));
    case DType::bf16: return bf16_to_f32(f32_to_bf16(float(acc) / float(n)));
    case DType::f64: return acc / n;
    default: return std::trunc(acc / n);
  }
}

struct Sweep {
  ProcessGroup& pg;
  std::vector<std::string> failures{};
  int checked = 0;

  template <typename... A>
  void expect(bool ok, A&&... parts) {
    ++checked;
    if (!ok && failures.size() < 20)
      failures.push_back(cat("rank ", pg.rank(), "/", pg.size(), ": ", std::forward<A>(parts)...));
  }
  std::vector<char> buf(size_t n, DType t) { return std::vector<char>(n * dtype_size(t) + 1, char(0x5a)); }
  void fill(std::vector<char>& b, size_t n, DType t, int rank, size_t first = 0) {
    for (size_t i = 0; i < n; ++i) put(b.data(), i, t, value(rank, first + i, t));
  }

  void all_reduce(size_t n, DType t) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min}) {
      for (bool in_place : {false, true}) {
        auto s = buf(n, t), r = buf(n, t);
        fill(s, n, t, pg.rank());
        if (in_place) pg.all_reduce(s.data(), s.data(), n, t, op);
        else pg.all_reduce(s.data(), r.data(), n, t, op);
        const void* out = in_place ? s.data() : r.data();
        for (size_t i = 0; i < n; ++i) {
          double want = reference(i, pg.size(), t, op), got = get(out, i, t);
          if (got != want) {
            expect(false, "all_reduce ", reduce_op_name(op), " ", dtype_name(t), " n=", n,
                   in_place ? " in place" : "", " [", i, "] = ", got, ", want ", want);
            break;
          }
        }
        expect(!n || static_cast<char*>(in_place ? s.data() : r.data())[n * dtype_size(t)] == 0x5a,
               "all_reduce wrote past the end, n=", n);
      }
    }
  }

  std::vector<size_t> uneven(size_t n) {
    std::vector<size_t> c;
    for (int r = 0; r < pg.size(); ++r) c.push_back((n + size_t(r) * 7) % (n + 1 + size_t(r)));
    return c;
  }

  void reduce_scatter(size_t n, DType t, bool equal) {
    std::vector<size_t> counts = equal ? std::vector<size_t>(size_t(pg.size()), n) : uneven(n);
    size_t total = 0, off = 0;
    for (int r = 0; r < pg.size(); ++r) {
      if (r < pg.rank()) off += counts[size_t(r)];
      total += counts[size_t(r)];
    }
    size_t own = counts[size_t(pg.rank())];
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
      for (bool in_place : {false, true}) {
        auto s = buf(total, t), r = buf(own, t);
        fill(s, total, t, pg.rank());
        char* out = in_place ? s.data() + off * dtype_size(t) : r.data();
        pg.reduce_scatter_v(s.data(), out, counts, t, op);
        for (size_t i = 0; i < own; ++i) {
          double want = reference(off + i, pg.size(), t, op), got = get(out, i, t);
          if (got != want) {
            expect(false, "reduce_scatter", equal ? "" : "_v", " ", reduce_op_name(op), " ",
                   dtype_name(t), " n=", n, in_place ? " in place" : "", " [", i, "] = ", got,
                   ", want ", want);
            break;
          }
        }
        if (in_place)  // the other blocks of the input are left alone
          for (size_t i = 0; i < total; ++i)
            if ((i < off || i >= off + own) && get(s.data(), i, t) != value(pg.rank(), i, t)) {
              expect(false, "reduce_scatter in place changed element ", i, " outside the own block");
              break;
            }
      }
    }
  }

  void all_gather(size_t n, DType t, bool equal) {
    std::vector<size_t> counts = equal ? std::vector<size_t>(size_t(pg.size()), n) : uneven(n);
    std::vector<size_t> off(counts.size() + 1, 0);
    for (size_t r = 0; r < counts.size(); ++r) off[r + 1] = off[r] + counts[r];
    size_t own = counts[size_t(pg.rank())];
    for (bool in_place : {false, true}) {
      auto s = buf(own, t), r = buf(off.back(), t);
      // Contributions are the rank's values at its block's global indices.
      for (size_t i = 0; i < own; ++i) put(s.data(), i, t, value(pg.rank(), off[size_t(pg.rank())] + i, t));
      const void* send = s.data();
      if (in_place) {
        std::memcpy(r.data() + off[size_t(pg.rank())] * dtype_size(t), s.data(), own * dtype_size(t));
        send = r.data() + off[size_t(pg.rank())] * dtype_size(t);
      }
      pg.all_gather_v(send, r.data(), counts, t);
      for (int p = 0; p < pg.size(); ++p)
        for (size_t i = off[size_t(p)]; i < off[size_t(p) + 1]; ++i)
          if (get(r.data(), i, t) != value(p, i, t)) {
            expect(false, "all_gather", equal ? "" : "_v", " ", dtype_name(t), " n=", n,
                   in_place ? " in place" : "", " element ", i, " from rank ", p, " = ",
                   get(r.data(), i, t), ", want ", value(p, i, t));
            p = pg.size();
            break;
          }
    }
  }

  void broadcast_and_reduce(size_t n, DType t) {
    for (int root = 0; root < pg.size(); root += std::max(1, pg.size() / 2)) {
      auto d = buf(n, t);
      fill(d, n, t, pg.rank() == root ? root : root + 100);
      pg.broadcast(d.data(), n, t, root);
      for (size_t i = 0; i < n; ++i)
        if (get(d.data(), i, t) != value(root, i, t)) {
          expect(false, "broadcast root ", root, " ", dtype_name(t), " n=", n, " [", i, "]");
          break;
        }
      for (bool in_place : {false, true}) {
        auto s = buf(n, t), r = buf(n, t);
        fill(s, n, t, pg.rank());
        bool at_root = pg.rank() == root;
        void* out = (in_place && at_root) ? s.data() : r.data();
        pg.reduce(s.data(), out, n, t, ReduceOp::sum, root);
        if (!at_root) continue;
        for (size_t i = 0; i < n; ++i)
          if (get(out, i, t) != reference(i, pg.size(), t, ReduceOp::sum)) {
            expect(false, "reduce root ", root, " ", dtype_name(t), " n=", n, " [", i, "]");
            break;
          }
      }
    }
  }

  // Block for rank j from rank i holds value(i, 1000*j + k, t).
  void all_to_all(size_t n, DType t, bool equal) {
    int P = pg.size(), me = pg.rank();
    auto cnt = [&](int i, int j) { return equal ? n : (n + size_t(i) * 3 + size_t(j) * 5) % (n + 2); };
    std::vector<size_t> sc, rc;
    for (int j = 0; j < P; ++j) {
      sc.push_back(cnt(me, j));
      rc.push_back(cnt(j, me));
    }
    size_t ns = 0, nr = 0;
    for (int j = 0; j < P; ++j) ns += sc[size_t(j)], nr += rc[size_t(j)];
    for (bool in_place : {false, true}) {
      if (in_place && !equal) continue;
      auto s = buf(ns, t), r = buf(nr, t);
      size_t o = 0;
      for (int j = 0; j < P; ++j)
        for (size_t k = 0; k < sc[size_t(j)]; ++k) put(s.data(), o++, t, value(me, 1000 * size_t(j) + k, t));
      void* out = in_place ? s.data() : r.data();
      pg.all_to_all_v(s.data(), sc, out, rc, t);
      o = 0;
      for (int i = 0; i < P; ++i)
        for (size_t k = 0; k < rc[size_t(i)]; ++k, ++o)
          if (get(out, o, t) != value(i, 1000 * size_t(me) + k, t)) {
            expect(false, "all_to_all", equal ? "" : "_v", " ", dtype_name(t), " n=", n,
                   in_place ? " in place" : "", " block from rank ", i, " element ", k);
            i = P;
            break;
          }
    }
  }

  void send_recv(size_t n, DType t) {
    int P = pg.size(), me = pg.rank();
    auto s = buf(n, t), r = buf(n, t);
    fill(s, n, t, me);
    WorkPtr ws = pg.send_async(s.data(), n, t, (me + 1) % P, 3);
    WorkPtr wr = pg.recv_async(r.data(), n, t, (me + P - 1) % P, 3);
    ws->wait();
    wr->wait();
    int from = (me + P - 1) % P;
    for (size_t i = 0; i < n; ++i)
      if (get(r.data(), i, t) != value(from, i, t)) {
        expect(false, "send/recv ", dtype_name(t), " n=", n, " [", i, "]");
        break;
      }
  }

  void run(const std::vector<size_t>& counts, const std::vector<DType>& dtypes, bool p2p = true) {
    for (DType t : dtypes)
      for (size_t n : counts) {
        all_reduce(n, t);
        reduce_scatter(n, t, true);
        reduce_scatter(n, t, false);
        all_gather(n, t, true);
        all_gather(n, t, false);
        broadcast_and_reduce(n, t);
        all_to_all(n, t, true);
        all_to_all(n, t, false);
        if (p2p) send_recv(n, t);
        pg.barrier();
      }
  }
};

}  // namespace strata::comm::testing
