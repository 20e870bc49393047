#include "comm/benchmark.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/timer.h"
#include "nlohmann/json.hpp"

namespace strata::comm {

const char* bench_op_name(BenchOp op) {
  switch (op) {
    case BenchOp::allreduce: return "allreduce";
    case BenchOp::allgather: return "allgather";
    case BenchOp::reducescatter: return "reducescatter";
    case BenchOp::alltoall: return "alltoall";
    case BenchOp::broadcast: return "broadcast";
    case BenchOp::reduce: return "reduce";
    case BenchOp::sendrecv: return "sendrecv";
  }
  return "?";
}

std::vector<BenchOp> parse_bench_ops(std::string_view s) {
  const BenchOp all[] = {BenchOp::allreduce, BenchOp::allgather, BenchOp::reducescatter,
                         BenchOp::alltoall,  BenchOp::broadcast, BenchOp::reduce,
                         BenchOp::sendrecv};
  if (s == "all") return std::vector<BenchOp>(std::begin(all), std::end(all));
  for (BenchOp op : all)
    if (s == bench_op_name(op)) return {op};
  fail("unknown op '", std::string(s),
       "' (expected allreduce, allgather, reducescatter, alltoall, broadcast, reduce, sendrecv or all)");
}

double bus_factor(BenchOp op, int n) {
  switch (op) {
    case BenchOp::allreduce: return 2.0 * (n - 1) / n;
    case BenchOp::allgather:
    case BenchOp::reducescatter:
    case BenchOp::alltoall: return double(n - 1) / n;
    default: return 1.0;
  }
}

size_t parse_size(std::string_view s) {
  std::string t(s);
  STRATA_CHECK(!t.empty(), "empty size");
  size_t i = 0;
  while (i < t.size() && std::isdigit((unsigned char)t[i])) ++i;
  STRATA_CHECK(i > 0, "size '", t, "' is not a number (e.g. 8, 1K, 256M, 1G)");
  const double v = std::strtod(t.substr(0, i).c_str(), nullptr);  // 400 digits: HUGE_VAL, no throw
  std::string unit = t.substr(i);
  for (char& c : unit) c = char(std::toupper((unsigned char)c));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  double mult = unit.empty() ? 1 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0 : unit == "G" ? 1073741824.0 : -1;
  STRATA_CHECK(mult > 0, "size '", t, "' has an unknown unit (use K, M or G)");
  // Past 2^63 the cast to size_t is undefined (99999999999999999999 wrapped to a small size).
  STRATA_CHECK(v * mult < 9.2e18, "size '", t, "' is more bytes than any buffer can hold");
  return size_t(v * mult);
}

std::vector<size_t> bench_sizes(size_t min_bytes, size_t max_bytes, size_t factor) {
  STRATA_CHECK(min_bytes >= 1, "the smallest size (-b) must be at least 1 byte");
  STRATA_CHECK(max_bytes >= min_bytes, "size range is empty: -b ", min_bytes,
               " is larger than -e ", max_bytes);
  STRATA_CHECK(factor >= 2, "the size factor (-f) must be at least 2, got ", factor);
  STRATA_CHECK(max_bytes <= (size_t(16) << 30), "-e ", max_bytes, " bytes is more than 16 GiB");
  std::vector<size_t> v;
  for (size_t b = min_bytes; b <= max_bytes; b *= factor) {
    v.push_back(b);
    if (b > max_bytes / factor) break;
  }
  return v;
}

namespace {

// Inputs are small integers, exact in every dtype and in any summation order.
double input_value(int rank, size_t i) { return double(((rank + 1) * 3 + int(i % 7)) % 8); }

void fill(void* p, size_t n, DType t, int rank, size_t first_index = 0) {
  for (size_t i = 0; i < n; ++i) {
    double v = input_value(rank, first_index + i);
    switch (t) {
      case DType::f32: static_cast<float*>(p)[i] = float(v); break;
      case DType::bf16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(float(v)); break;
      case DType::f64: static_cast<double*>(p)[i] = v; break;
      case DType::i32: static_cast<int32_t*>(p)[i] = int32_t(v); break;
      case DType::i64: static_cast<int64_t*>(p)[i] = int64_t(v); break;
      case DType::u8: static_cast<uint8_t*>(p)[i] = uint8_t(v); break;
    }
  }
}

double read(const void* p, size_t i, DType t) {
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

double reduced_value(size_t i, int n, DType t, ReduceOp op) {
  double acc = input_value(0, i);
  for (int r = 1; r < n; ++r) {
    double v = input_value(r, i);
    acc = op == ReduceOp::max ? std::max(acc, v) : op == ReduceOp::min ? std::min(acc, v) : acc + v;
  }
  if (op == ReduceOp::avg) {
    bool integer = t == DType::i32 || t == DType::i64 || t == DType::u8;
    acc = integer ? std::trunc(acc / n) : acc / n;
  }
  if (t == DType::u8) acc = std::fmod(acc, 256.0);
  return acc;
}

bool close_enough(double got, double want, DType t) {
  double tol = t == DType::bf16 ? 1e-2 : t == DType::f32 ? 1e-6 : t == DType::f64 ? 1e-12 : 0;
  return std::fabs(got - want) <= tol * std::fabs(want);
}

struct Buffers {
  std::vector<char> send, recv;
  void ensure(size_t s, size_t r) {
    if (send.size() < s) send.resize(s, 1);
    if (recv.size() < r) recv.resize(r, 1);
  }
};

}  // namespace

BenchRow bench_one(ProcessGroup& pg, BenchOp op, size_t bytes, const BenchConfig& cfg) {
  int n = pg.size(), me = pg.rank();
  size_t es = dtype_size(cfg.dtype);
  BenchRow row;
  row.op = op;
  row.dtype = cfg.dtype;
  row.redop = cfg.redop;
  bool per_rank = op == BenchOp::allgather || op == BenchOp::reducescatter || op == BenchOp::alltoall;
  size_t block = per_rank ? bytes / es / size_t(n) : bytes / es;  // elements per rank block
  row.count = per_rank ? block * size_t(n) : block;
  row.bytes = row.count * es;

  thread_local Buffers buf;
  size_t send_elems = op == BenchOp::allgather ? block : row.count;
  size_t recv_elems = op == BenchOp::reducescatter ? block : row.count;
  buf.ensure(send_elems * es, recv_elems * es);
  char* send = buf.send.data();
  char* recv = buf.recv.data();
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  auto run = [&] {
    switch (op) {
      case BenchOp::allreduce: pg.all_reduce(cfg.in_place ? recv : send, recv, block, cfg.dtype, cfg.redop); break;
      case BenchOp::allgather: pg.all_gather(send, recv, block, cfg.dtype); break;
      case BenchOp::reducescatter: pg.reduce_scatter(send, recv, block, cfg.dtype, cfg.redop); break;
      case BenchOp::alltoall: pg.all_to_all(send, recv, block, cfg.dtype); break;
      case BenchOp::broadcast: pg.broadcast(recv, block, cfg.dtype, 0); break;
      case BenchOp::reduce: pg.reduce(send, recv, block, cfg.dtype, cfg.redop, 0); break;
      case BenchOp::sendrecv: {
        WorkPtr s = pg.send_async(send, block, cfg.dtype, next, 7);
        WorkPtr r = pg.recv_async(recv, block, cfg.dtype, prev, 7);
        s->wait();
        r->wait();
        break;
      }
    }
  };
  fill(send, send_elems, cfg.dtype, me);
  for (int i = 0; i < cfg.warmup; ++i) run();
  pg.barrier();
  int64_t t0 = now_ns();
  for (int i = 0; i < cfg.iters; ++i) run();
  double local_us = double(now_ns() - t0) * 1e-3 / std::max(1, cfg.iters);
  pg.all_reduce(&local_us, &local_us, 1, DType::f64, ReduceOp::max);
  row.time_us = local_us;
  row.algbw = row.time_us > 0 ? double(row.bytes) / (row.time_us * 1e3) : 0;
  row.busbw = row.algbw * bus_factor(op, n);

  if (cfg.check) {
    fill(send, send_elems, cfg.dtype, me);
    if (op == BenchOp::allreduce && cfg.in_place) fill(recv, recv_elems, cfg.dtype, me);
    else std::memset(recv, 0xEE, recv_elems * es);  // poison: untouched output counts as wrong
    if (op == BenchOp::broadcast && me == 0) fill(recv, block, cfg.dtype, 0);
    run();
    int64_t wrong = 0;
    for (size_t i = 0; i < recv_elems; ++i) {
      double want = 0;
      switch (op) {
        case BenchOp::allreduce: want = reduced_value(i, n, cfg.dtype, cfg.redop); break;
        case BenchOp::reducescatter: want = reduced_value(size_t(me) * block + i, n, cfg.dtype, cfg.redop); break;
        case BenchOp::allgather: want = input_value(int(i / std::max<size_t>(block, 1)), i % std::max<size_t>(block, 1)); break;
        case BenchOp::alltoall: want = input_value(int(i / std::max<size_t>(block, 1)), size_t(me) * block + i % std::max<size_t>(block, 1)); break;
        case BenchOp::broadcast: want = input_value(0, i); break;
        case BenchOp::reduce:
          if (me != 0) { want = read(recv, i, cfg.dtype); break; }
          want = reduced_value(i, n, cfg.dtype, cfg.redop);
          break;
        case BenchOp::sendrecv: want = input_value(prev, i); break;
      }
      if (!close_enough(read(recv, i, cfg.dtype), want, cfg.dtype)) ++wrong;
    }
    pg.all_reduce(&wrong, &wrong, 1, DType::i64, ReduceOp::sum);
    row.wrong = wrong;
  }
  return row;
}

std::string bench_header() {
  char line[256];
  std::snprintf(line, sizeof line, "#%11s %12s %9s %6s %11s %10s %10s %7s", "size(B)",
                "count(elem)", "type", "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  return line;
}

std::string bench_format(const BenchRow& r) {
  bool reduces = r.op == BenchOp::allreduce || r.op == BenchOp::reducescatter || r.op == BenchOp::reduce;
  char line[256];
  std::snprintf(line, sizeof line, "%12zu %12zu %9s %6s %11.2f %11.3f %11.3f %7s", r.bytes,
                r.count, dtype_name(r.dtype), reduces ? reduce_op_name(r.redop) : "none",
                r.time_us, r.algbw, r.busbw,
                r.wrong < 0 ? "N/A" : std::to_string(r.wrong).c_str());
  return line;
}

std::string bench_json(const BenchRow& r) {
  nlohmann::json j = {{"op", bench_op_name(r.op)}, {"bytes", r.bytes},  {"count", r.count},
                      {"type", dtype_name(r.dtype)}, {"time_us", r.time_us}, {"algbw", r.algbw},
                      {"busbw", r.busbw}};
  j["wrong"] = r.wrong < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.wrong);
  return j.dump();
}

}  // namespace strata::comm
