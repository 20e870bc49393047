// gemm_bf16's oneDNN path: Debian's libdnnl matmul primitive (bf16 x bf16 -> fp32), created
// once per shape and kept in a process-wide cache.
//   C (M,N) = alpha * op(A) @ op(B) + beta * C (+ bias)
// maps to one matmul with output scale alpha, a sum post-op of scale beta (when beta != 0)
// and a binary-add post-op of the (1,N) bias, applied in that order, so the API's semantics
// are exactly gemm_bf16's. Transposes are strides of the memory descriptors; bf16 operands
// are used in place, fp32 ones are rounded (nearest even) into a per-thread scratch buffer
// that is reused from call to call.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "kernels/convert.h"
#include "kernels/gemm_bf16_impl.h"

namespace strata::kernels::detail {

namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

// Everything a created primitive depends on. The thread count is part of it: oneDNN sizes
// its work split when the primitive is created.
using Key = std::tuple<int, int, int, int, int, int64_t, int64_t, int64_t, float, float, bool,
                       int, bool>;

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

// op(X) (rows, cols) over memory with row stride ld, X stored as op says.
dnnl::memory::desc operand_desc(Op op, int rows, int cols, int64_t ld) {
  return dnnl::memory::desc({rows, cols}, dt::bf16,
                            op == Op::N ? dims{ld, 1} : dims{1, ld});
}

// A created primitive and the memory descriptors it was created for.
struct Prim {
  dnnl::memory::desc a, b, c, bias, scratch;
  dnnl::matmul mm;
};

std::unique_ptr<Prim> make_matmul(const Bf16Args& g, int64_t lda, int64_t ldb) {
  auto p = std::make_unique<Prim>();
  p->a = operand_desc(g.opa, g.M, g.K, lda);
  p->b = operand_desc(g.opb, g.K, g.N, ldb);
  p->c = dnnl::memory::desc({g.M, g.N}, dt::f32, dims{g.ldc, 1});
  p->bias = dnnl::memory::desc({1, g.N}, dt::f32, dims{g.N, 1});
  dnnl::primitive_attr attr;
  if (g.alpha != 1.0f) attr.set_output_scales(0, {g.alpha});
  dnnl::post_ops po;
  if (g.beta != 0.0f) po.append_sum(g.beta);
  if (g.bias) po.append_binary(dnnl::algorithm::binary_add, p->bias);
  attr.set_post_ops(po);
  // The caller's scratchpad: libdnnl's own is shared between primitives, which races when
  // two threads execute at once (a forced onednn path runs attention tiles on every thread).
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p->a, p->b, p->c), attr, engine());
  p->scratch = pd.scratchpad_desc();
  p->mm = dnnl::matmul(pd);
  return p;
}

const Prim& cached_matmul(const Bf16Args& g, int64_t lda, int64_t ldb) {
  static std::mutex mu;
  static std::map<Key, std::unique_ptr<Prim>> cache;
  const Key key{g.M, g.N, g.K, int(g.opa), int(g.opb), lda, ldb, int64_t(g.ldc), g.alpha, g.beta,
                g.bias != nullptr, omp_get_max_threads(), bool(omp_in_parallel())};
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[key];
  if (!slot) slot = make_matmul(g, lda, ldb);
  return *slot;
}

thread_local std::vector<uint16_t> tl_a, tl_b;
thread_local std::vector<uint8_t> tl_scratch;

// A bf16 view of operand X, stored (rows, cols) with row stride X.ld: itself when it is bf16,
// else its rounding into scratch (dense, row stride cols).
uint16_t* as_bf16(const Mat& X, int rows, int cols, std::vector<uint16_t>& scratch, int64_t& ld,
                  bool par) {
  if (X.t == DType::bf16) {
    ld = X.ld;
    return static_cast<uint16_t*>(const_cast<void*>(X.p));
  }
  scratch.resize(size_t(rows) * cols);
  const float* x = static_cast<const float*>(X.p);
  uint16_t* d = scratch.data();
  if (X.ld == cols) {
    const int64_t n = int64_t(rows) * cols, chunk = 1 << 16;
#pragma omp parallel for schedule(static) if (par && n > chunk)
    for (int64_t s = 0; s < n; s += chunk) f32_to_bf16(d + s, x + s, std::min(chunk, n - s));
  } else {
#pragma omp parallel for schedule(static) if (par)
    for (int r = 0; r < rows; ++r) f32_to_bf16(d + int64_t(r) * cols, x + int64_t(r) * X.ld, cols);
  }
  ld = cols;
  return d;
}

}  // namespace

void gemm_onednn(const Bf16Args& g, bool par) {
  const int ar = g.opa == Op::N ? g.M : g.K, ac = g.opa == Op::N ? g.K : g.M;
  const int br = g.opb == Op::N ? g.K : g.N, bc = g.opb == Op::N ? g.N : g.K;
  int64_t lda = 0, ldb = 0;
  uint16_t* a = as_bf16(g.A, ar, ac, tl_a, lda, par);
  uint16_t* b = as_bf16(g.B, br, bc, tl_b, ldb, par);
  const Prim& p = cached_matmul(g, lda, ldb);
  thread_local dnnl::stream strm(engine());
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(p.a, engine(), a)},
                                             {DNNL_ARG_WEIGHTS, dnnl::memory(p.b, engine(), b)},
                                             {DNNL_ARG_DST, dnnl::memory(p.c, engine(), g.C)}};
  tl_scratch.resize(std::max<size_t>(1, p.scratch.get_size()));
  args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.scratch, engine(), tl_scratch.data()));
  if (g.bias) {  // the binary post-op follows the sum post-op when there is one
    const int slot = DNNL_ARG_ATTR_MULTIPLE_POST_OP(g.beta != 0.0f ? 1 : 0) | DNNL_ARG_SRC_1;
    args.emplace(slot, dnnl::memory(p.bias, engine(), const_cast<float*>(g.bias)));
  }
  p.mm.execute(strm, args);
  strm.wait();
}

}  // namespace strata::kernels::detail
