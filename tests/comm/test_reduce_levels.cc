// The backends' reduction loops (comm/reduce_kernels.h) on every instruction-set level this
// CPU has: each gives the bits of a plain loop over the inputs in rank order, so a collective
// reduces alike whichever level a rank's CPU chose (hosts of different kinds in one job).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "comm/reduce_kernels.h"
#include "core/dtype.h"
#include "kernels/isa.h"

namespace strata::test {
namespace k = strata::kernels;

namespace {

constexpr size_t kN = 1000 + 37;  // two blocks of the loops and a tail

std::vector<uint8_t> random_bytes(size_t bytes, uint64_t seed) {
  std::vector<uint8_t> v(bytes);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = uint8_t(x >> 24);
  }
  return v;
}

// Inputs of a dtype with finite values: random bits for the integers, random numbers of
// mixed signs and magnitudes for the floating-point types.
std::vector<uint8_t> input(DType t, int rank) {
  const size_t es = dtype_size(t);
  auto v = random_bytes(kN * es, uint64_t(rank) + 10 * uint64_t(t));
  for (size_t i = 0; i < kN; ++i) {
    const double x = (double(v[i * es]) - 127.5) * (1.0 + v[i * es + es - 1] % 64) / 7.0;
    if (t == DType::f32) {
      const float f = float(x);
      std::memcpy(&v[i * 4], &f, 4);
    } else if (t == DType::f64) {
      std::memcpy(&v[i * 8], &x, 8);
    } else if (t == DType::bf16) {
      const uint16_t h = f32_to_bf16(float(x));
      std::memcpy(&v[i * 2], &h, 2);
    }
  }
  return v;
}

// The element-wise answer, one element at a time in rank order (the contract of
// reduce_kernels.h: bf16 summed in fp32 and rounded once, avg divided once).
template <typename T, typename Acc>
std::vector<uint8_t> plain_reduce(const std::vector<std::vector<uint8_t>>& in, comm::ReduceOp op,
                                  Acc (*load)(T), T (*store)(Acc)) {
  std::vector<uint8_t> out(kN * sizeof(T));
  for (size_t i = 0; i < kN; ++i) {
    Acc acc{};
    for (size_t r = 0; r < in.size(); ++r) {
      T x;
      std::memcpy(&x, &in[r][i * sizeof(T)], sizeof(T));
      const Acc a = load(x);
      if (r == 0) acc = a;
      else if (op == comm::ReduceOp::max) acc = acc < a ? a : acc;
      else if (op == comm::ReduceOp::min) acc = a < acc ? a : acc;
      else acc = acc + a;
    }
    if (op == comm::ReduceOp::avg) acc = Acc(acc / Acc(int(in.size())));
    const T y = store(acc);
    std::memcpy(&out[i * sizeof(T)], &y, sizeof(T));
  }
  return out;
}

std::vector<uint8_t> expected(DType t, const std::vector<std::vector<uint8_t>>& in,
                              comm::ReduceOp op) {
  switch (t) {
    case DType::f32: return plain_reduce<float, float>(in, op, [](float x) { return x; }, [](float x) { return x; });
    case DType::f64: return plain_reduce<double, double>(in, op, [](double x) { return x; }, [](double x) { return x; });
    case DType::bf16: return plain_reduce<uint16_t, float>(in, op, bf16_to_f32, f32_to_bf16);
    default: return plain_reduce<int32_t, int64_t>(in, op, [](int32_t x) { return int64_t(x); },
                                                   [](int64_t x) { return int32_t(uint32_t(x)); });
  }
}

}  // namespace

TEST(ReduceLevels, EveryLevelGivesTheBitsOfAPlainLoopInRankOrder) {
  for (k::Isa level : k::available_isas()) {
    k::ScopedIsa on(level);
    for (DType t : {DType::f32, DType::bf16, DType::f64, DType::i32}) {
      for (comm::ReduceOp op : {comm::ReduceOp::sum, comm::ReduceOp::avg, comm::ReduceOp::max,
                                comm::ReduceOp::min}) {
        if (t == DType::i32 && op == comm::ReduceOp::avg) continue;  // avg is floating point
        for (int nin : {1, 2, 3, 5}) {
          std::vector<std::vector<uint8_t>> in;
          std::vector<const void*> ptrs;
          for (int r = 0; r < nin; ++r) in.push_back(input(t, r));
          for (const auto& v : in) ptrs.push_back(v.data());
          std::vector<uint8_t> out(kN * dtype_size(t)), out2(out.size());
          comm::reduce_inputs(out.data(), out2.data(), ptrs.data(), nin, kN, t, op, nin);
          const auto want = expected(t, in, op);
          SCOPED_TRACE(std::string(k::isa_name(level)) + " " + dtype_name(t) + " " +
                       comm::reduce_op_name(op) + " of " + std::to_string(nin));
          EXPECT_TRUE(out == want);
          EXPECT_TRUE(out2 == want);
        }
      }
    }
  }
}

// In place (the mpi backend's avg after a plain sum), on every level.
TEST(ReduceLevels, DivideInPlaceRoundsAlikeOnEveryLevel) {
  for (k::Isa level : k::available_isas()) {
    k::ScopedIsa on(level);
    auto v = input(DType::f32, 3);
    const auto want = expected(DType::f32, {v, v, v}, comm::ReduceOp::sum);
    auto sum = want;
    comm::divide_in_place(sum.data(), kN, DType::f32, 3);
    for (size_t i = 0; i < kN; ++i) {
      float s, d;
      std::memcpy(&s, &want[i * 4], 4);
      std::memcpy(&d, &sum[i * 4], 4);
      ASSERT_EQ(d, s / 3.0f) << k::isa_name(level) << " element " << i;
    }
  }
}

}  // namespace strata::test
