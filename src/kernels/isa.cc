// The level choice and the dispatching definitions of the public fp32 kernels (isa.h). This
// unit is compiled for the build's baseline; it calls into isa_baseline, isa_v3 or isa_v4.
#include "kernels/isa.h"

#include <atomic>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "kernels/cpu.h"
#include "kernels/attention_block.h"
#include "kernels/kernels.h"
#include "kernels/selfcheck.h"

namespace strata::kernels {

static const EnvVar kIsa("STRATA_ISA", "auto",
                         "instruction-set level of the fp32 kernels: auto (the highest the CPU has "
                         "that passes its self-check), x86-64-v4, x86-64-v3 or x86-64-v2");
static const EnvVar kGemmImpl("STRATA_GEMM", "strata",
                              "GEMM used by the kernels: strata (own, thread-count independent "
                              "bits) or openblas (cblas_sgemm)");

// Each level's copy of the kernels, and its known-answer check (isa_check.cc).
#define STRATA_ISA_KERNEL(ret, name, params, args) ret name params;
namespace isa_baseline {
bool self_check();
#include "kernels/isa_kernels.inc"
}  // namespace isa_baseline
#if defined(__x86_64__)
namespace isa_v3 {
bool self_check();
#include "kernels/isa_kernels.inc"
}  // namespace isa_v3
namespace isa_v4 {
bool self_check();
#include "kernels/isa_kernels.inc"
}  // namespace isa_v4
#endif
#undef STRATA_ISA_KERNEL

bool gemm_uses_openblas() {
  static const bool v = [] {
    const std::string s = kGemmImpl.get();
    STRATA_CHECK(s == "strata" || s == "openblas", "STRATA_GEMM must be strata or openblas (got '",
                 s, "')");
    return s == "openblas";
  }();
  return v;
}

const char* isa_name(Isa i) {
#if defined(__x86_64__)
  switch (i) {
    case Isa::baseline: return "x86-64-v2";
    case Isa::v3: return "x86-64-v3";
    case Isa::v4: return "x86-64-v4";
  }
  return "?";
#else
  return i == Isa::baseline ? "baseline" : "?";
#endif
}

bool isa_available(Isa i) {
  switch (i) {
    case Isa::baseline: return true;
    case Isa::v3: return cpu_has_x86_64_v3();
    case Isa::v4: return cpu_has_x86_64_v4();
  }
  return false;
}

std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::baseline, Isa::v3, Isa::v4})
    if (isa_available(i)) out.push_back(i);
  return out;
}

namespace {

bool level_check(Isa i) {
  switch (i) {
    case Isa::baseline: return isa_baseline::self_check();
#if defined(__x86_64__)
    case Isa::v3: return isa_v3::self_check();
    case Isa::v4: return isa_v4::self_check();
#else
    default: return false;
#endif
  }
  return false;
}

// auto: the levels that failed their check, for the note.
Isa choose(std::vector<Isa>& failed) {
  const std::string s = kIsa.get();
  if (s == "auto") {
    // The highest level the CPU has and whose check passes; the baseline needs no check
    // (the whole binary is built for it).
    for (Isa i : {Isa::v4, Isa::v3}) {
      if (!isa_available(i)) continue;
      const PathCheck& c = prove_path(isa_name(i), [i] { return level_check(i); });
      if (c.ok) return i;
      failed.push_back(i);
    }
    return Isa::baseline;
  }
  Isa want = Isa::baseline;
  bool known = false;
  for (Isa i : {Isa::baseline, Isa::v3, Isa::v4}) {
    const std::string name = isa_name(i);  // also "v2", "v3", "v4" for "x86-64-v2", ...
    if (s == name || (name.rfind("x86-64-", 0) == 0 && s == name.substr(7))) want = i, known = true;
  }
  STRATA_CHECK(known, "STRATA_ISA must be auto, x86-64-v4, x86-64-v3 or x86-64-v2 (got '", s,
               "')");
  STRATA_CHECK(isa_available(want), "STRATA_ISA=", s, ": this CPU lacks ", isa_name(want),
               " (it has: ", cpu_info().flags_line(), "); use auto");
  if (want != Isa::baseline) {
    const PathCheck& c = prove_path(isa_name(want), [want] { return level_check(want); });
    STRATA_CHECK(c.ok, "STRATA_ISA=", s, ": ", isa_name(want), " failed its self-check on this CPU (",
                 c.why, "); use auto");
  }
  return want;
}

std::atomic<int> override_level{-1};

}  // namespace

Isa isa() {
  static const Isa chosen = [] {
    std::vector<Isa> failed;
    const Isa i = choose(failed);
    for (Isa f : failed)
      add_path_note(std::string(isa_name(f)) + " failed its self-check (" +
                    prove_path(isa_name(f), {}).why + "); using " + isa_name(i));
    return i;
  }();
  const int o = override_level.load(std::memory_order_relaxed);
  return o < 0 ? chosen : Isa(o);
}

ScopedIsa::ScopedIsa(Isa i) : saved_(override_level.load()) {
  STRATA_CHECK(isa_available(i), "ScopedIsa: this CPU lacks ", isa_name(i));
  override_level.store(int(i));
}

ScopedIsa::~ScopedIsa() { override_level.store(saved_); }

// The public kernels: one switch per call (a static's guard and a compare; the kernels it
// fronts take microseconds at least).
#if defined(__x86_64__)
#define STRATA_ISA_KERNEL(ret, name, params, args)             \
  ret name params {                                            \
    switch (isa()) {                                           \
      case Isa::v4: return isa_v4::name args;                  \
      case Isa::v3: return isa_v3::name args;                  \
      default: return isa_baseline::name args;                 \
    }                                                          \
  }
#else
#define STRATA_ISA_KERNEL(ret, name, params, args) \
  ret name params { return isa_baseline::name args; }
#endif
#include "kernels/isa_kernels.inc"
#undef STRATA_ISA_KERNEL

}  // namespace strata::kernels
