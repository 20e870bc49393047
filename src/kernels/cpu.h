// What the CPU at hand offers the kernels, read from cpuid and the OS's enabled state (XCR0),
// never from how the binary was compiled. Every path that needs an instruction set is
// entered only after these say yes and its self-check passed (selfcheck.h).
//
// Terms: the x86-64 *levels* of the psABI: x86-64-v2 (SSE4.2, POPCNT: every x86-64 CPU
// since about 2009 and the build's baseline), x86-64-v3 (AVX2, FMA, BMI1/2, F16C, MOVBE,
// LZCNT), x86-64-v4 (v3 plus AVX-512 F/BW/CD/DQ/VL). Other architectures have one level,
// "baseline".
#pragma once
#include <string>
#include <vector>

namespace strata::kernels {

bool cpu_has_x86_64_v3();
bool cpu_has_x86_64_v4();
bool cpu_has_avx512bf16();
bool cpu_has_amx_bf16();  // the instructions and the OS tile state (before the permission)

// For logs, summaries and benchmark tables: vendor ("AuthenticAMD"), model (the brand
// string) and the flags that select kernel paths, in the names /proc/cpuinfo uses.
struct CpuInfo {
  std::string vendor, model;
  std::vector<std::string> flags;
  std::string flags_line() const;  // "avx2 fma avx512f ..."
};
const CpuInfo& cpu_info();

}  // namespace strata::kernels
