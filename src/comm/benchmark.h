// Collective benchmarks in the nccl-tests conventions, shared by `strata bench comm` and
// the bandwidth doctor. Run by every rank of a group; results agree on all ranks.
//
// Sizes follow nccl-tests: `bytes` is the whole buffer of the op (all-reduce: the vector;
// all-gather: the gathered output; reduce-scatter: the input; all-to-all: the send buffer;
// broadcast/reduce/sendrecv: the message). Bus bandwidth factors (n ranks): all-reduce
// 2(n-1)/n; reduce-scatter, all-gather, all-to-all (n-1)/n; broadcast, reduce, sendrecv 1.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "comm/process_group.h"

namespace strata::comm {

enum class BenchOp : uint8_t { allreduce, allgather, reducescatter, alltoall, broadcast, reduce, sendrecv };
const char* bench_op_name(BenchOp op);
// "all" expands to every op; throws Error naming a bad one.
std::vector<BenchOp> parse_bench_ops(std::string_view s);
double bus_factor(BenchOp op, int nranks);

struct BenchRow {
  BenchOp op;
  size_t bytes = 0;
  size_t count = 0;  // elements (nccl-tests' "count" column)
  DType dtype = DType::f32;
  ReduceOp redop = ReduceOp::sum;
  double time_us = 0;  // mean time per op, the slowest rank's
  double algbw = 0;    // GB/s = bytes / time
  double busbw = 0;    // GB/s = algbw * bus_factor
  int64_t wrong = -1;  // elements that differ from the reference, summed over ranks; -1: unchecked
};

struct BenchConfig {
  int iters = 20;
  int warmup = 5;
  bool check = false;
  DType dtype = DType::f32;
  ReduceOp redop = ReduceOp::sum;
  bool in_place = false;  // all-reduce with send == recv (what trainers call); other ops: ignored
};

// Sizes min, min*f, ... <= max (nccl-tests -b/-e/-f). Throws Error for empty or bad ranges.
std::vector<size_t> bench_sizes(size_t min_bytes, size_t max_bytes, size_t factor);
// "8", "1K", "256M", "1G" (binary multiples). Throws Error naming the text.
size_t parse_size(std::string_view s);

// Measures one op at one size on `pg` (collective over the group).
BenchRow bench_one(ProcessGroup& pg, BenchOp op, size_t bytes, const BenchConfig& cfg);

// Table lines in the nccl-tests format.
std::string bench_header();
std::string bench_format(const BenchRow& r);
std::string bench_json(const BenchRow& r);

}  // namespace strata::comm
