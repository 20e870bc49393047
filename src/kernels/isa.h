// Run-time choice of the instruction-set level for strata's fp32 kernels.
//
// The hot fp32 kernels (GEMM, attention, layer/RMS norm, GELU/SwiGLU, RoPE, cross-entropy,
// the encoder, AdamW; isa_kernels.inc lists them) are compiled once per level, each copy in
// its own namespace (isa_baseline, isa_v3, isa_v4) with its own target flags; the rest of
// strata is built for the baseline. The public functions (kernels/gemm.h, ...) call the copy
// of the level chosen once per process:
//   STRATA_ISA=auto (default): the highest level the CPU has whose self-check passed
//   (selfcheck.h), else the next one down; x86-64-v4|x86-64-v3|x86-64-v2 forces a level and
//   is refused in one line when the CPU lacks it or it fails its check.
//
// Numerics: the levels differ only in vector width and, from v3 on, fused multiply-add (the
// compiler contracts a*b+c). AdamW, the gradient norm and the dtype conversions are compiled
// without contraction (their units' flags), so a parameter update is bit-identical on every
// level: data-parallel replicas on hosts of different CPU kinds keep equal parameters.
#pragma once
#include <cstdint>
#include <vector>

namespace strata::kernels {

enum class Isa : uint8_t { baseline, v3, v4 };

Isa isa();                    // the level this process's kernels run
const char* isa_name(Isa i);  // "x86-64-v2" (on other architectures "baseline"), "x86-64-v3", ...
bool isa_available(Isa i);    // the CPU has it (before its self-check)
std::vector<Isa> available_isas();  // every level the CPU has, lowest (baseline) first

// Tests and benchmarks: run the kernels of a given level on this thread's calls until the
// scope ends (the level must be available).
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa i);
  ~ScopedIsa();
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  int saved_;
};

}  // namespace strata::kernels
