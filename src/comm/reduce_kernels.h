// Element-wise reductions used by the backends. Every reduction combines all inputs at once
// (in rank order), so bf16 is summed in fp32 and rounded once, and avg divides once.
//
// Cost: reads nin*n elements, writes n (or 2n with a second destination); memory-bound, the
// loops are blocked so the accumulator stays in L1 and are vectorised for the instruction-set
// level the kernels run (kernels/isa.h: SSE4.2, AVX2 or AVX-512), with the same bits on each.
#pragma once
#include <cstddef>

#include "comm/types.h"
#include "core/dtype.h"

namespace strata::comm {

// out[i] = op(in[0][i], ..., in[nin-1][i]) for i < n; also written to out2 when non-null.
// avg divides by `divisor` (the group size). out may alias any input.
void reduce_inputs(void* out, void* out2, const void* const* in, int nin, size_t n, DType dtype,
                   ReduceOp op, int divisor);

// In place: data[i] = data[i] / divisor for avg after a plain sum (used by the mpi backend).
void divide_in_place(void* data, size_t n, DType dtype, int divisor);

}  // namespace strata::comm
