// Internal to kernels: the arguments every gemm_bf16 path receives, and the paths' entry
// points (each in its own translation unit, compiled for its instruction set).
#pragma once
#include "kernels/gemm_bf16.h"

namespace strata::kernels::detail {

struct Bf16Args {
  Op opa, opb;
  int M, N, K;
  float alpha;
  Mat A, B;
  float beta;
  float* C;
  int ldc;
  const float* bias;
};

// gemm_avx512bf16.cc (needs avx512f/bw/vl/bf16 at run time)
void gemm_avx512bf16(const Bf16Args& g, bool parallel);
// gemm_amx.cc (needs amx-tile/amx-bf16 and the tile-data permission at run time)
void gemm_amx(const Bf16Args& g, bool parallel);
// gemm_onednn.cc (libdnnl's matmul; fp32 operands rounded into per-thread scratch)
void gemm_onednn(const Bf16Args& g, bool parallel);
// Asks Linux for the AMX tile-data permission once; true when granted.
bool amx_permission();

// Shared helpers (gemm_bf16.cc): C = beta C (+ bias) for K = 0 or alpha = 0.
void scale_c_only(const Bf16Args& g);

}  // namespace strata::kernels::detail
