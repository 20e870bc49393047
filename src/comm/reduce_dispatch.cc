// The public reductions of reduce_kernels.h: the copy of reduce_kernels.cc for the
// instruction-set level this process's kernels run (kernels/isa.h: chosen once, after the
// level's self-check). Every level gives the same bits: the loops only add, compare and
// divide, in rank order, without contraction.
#include "comm/reduce_kernels.h"
#include "core/error.h"
#include "kernels/isa.h"

namespace strata::comm {

#define STRATA_REDUCE_LEVEL(ns)                                                              \
  namespace ns {                                                                           \
  void reduce_inputs(void* out, void* out2, const void* const* in, int nin, size_t n,      \
                     DType dtype, ReduceOp op, int divisor);                               \
  }
STRATA_REDUCE_LEVEL(isa_baseline)
#if defined(__x86_64__)
STRATA_REDUCE_LEVEL(isa_v3)
STRATA_REDUCE_LEVEL(isa_v4)
#endif
#undef STRATA_REDUCE_LEVEL

void reduce_inputs(void* out, void* out2, const void* const* in, int nin, size_t n, DType dtype,
                   ReduceOp op, int divisor) {
  STRATA_CHECK(nin >= 1, "reduce_inputs: no inputs");
#if defined(__x86_64__)
  switch (kernels::isa()) {
    case kernels::Isa::v4: return isa_v4::reduce_inputs(out, out2, in, nin, n, dtype, op, divisor);
    case kernels::Isa::v3: return isa_v3::reduce_inputs(out, out2, in, nin, n, dtype, op, divisor);
    default: break;
  }
#endif
  isa_baseline::reduce_inputs(out, out2, in, nin, n, dtype, op, divisor);
}

void divide_in_place(void* data, size_t n, DType dtype, int divisor) {
  const void* in[1] = {data};
  reduce_inputs(data, nullptr, in, 1, n, dtype, ReduceOp::avg, divisor);
}

}  // namespace strata::comm
