#include "kernels/cpu.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace strata::kernels {

namespace {

#if defined(__x86_64__)
struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs leaf(unsigned l, unsigned sub = 0) {
  Regs r;
  if (!__get_cpuid_count(l, sub, &r.a, &r.b, &r.c, &r.d)) r = Regs{};
  return r;
}

uint64_t xcr0() {
  if (!(leaf(1).c & (1u << 27))) return 0;  // OSXSAVE: xgetbv is there
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

bool bit(unsigned r, int i) { return (r >> i) & 1u; }

// The flags /proc/cpuinfo would show that select kernels, in the order of the levels.
struct Features {
  bool sse42, popcnt, avx, avx2, fma, bmi1, bmi2, f16c, movbe, lzcnt;
  bool avx512f, avx512bw, avx512cd, avx512dq, avx512vl, avx512bf16, amx_tile, amx_bf16;
  bool os_ymm, os_zmm, os_tiles;
};

Features read_features() {
  const Regs l1 = leaf(1), l7 = leaf(7), l71 = l7.a >= 1 ? leaf(7, 1) : Regs{};
  const Regs e1 = leaf(0x80000001);
  const uint64_t x = xcr0();
  Features f{};
  f.sse42 = bit(l1.c, 20), f.popcnt = bit(l1.c, 23), f.avx = bit(l1.c, 28), f.fma = bit(l1.c, 12);
  f.f16c = bit(l1.c, 29), f.movbe = bit(l1.c, 22), f.lzcnt = bit(e1.c, 5);
  f.bmi1 = bit(l7.b, 3), f.avx2 = bit(l7.b, 5), f.bmi2 = bit(l7.b, 8);
  f.avx512f = bit(l7.b, 16), f.avx512dq = bit(l7.b, 17), f.avx512cd = bit(l7.b, 28);
  f.avx512bw = bit(l7.b, 30), f.avx512vl = bit(l7.b, 31), f.avx512bf16 = bit(l71.a, 5);
  f.amx_bf16 = bit(l7.d, 22), f.amx_tile = bit(l7.d, 24);
  f.os_ymm = (x & 0x6) == 0x6;       // XMM and YMM state
  f.os_zmm = (x & 0xe6) == 0xe6;     // plus opmask, ZMM_Hi256, Hi16_ZMM
  f.os_tiles = (x & (3ull << 17)) == (3ull << 17);  // XTILECFG, XTILEDATA
  return f;
}

const Features& features() {
  static const Features f = read_features();
  return f;
}

std::string brand() {
  unsigned words[12] = {};
  if (leaf(0x80000000).a < 0x80000004) return "";
  for (unsigned i = 0; i < 3; ++i) {
    const Regs r = leaf(0x80000002 + i);
    words[4 * i] = r.a, words[4 * i + 1] = r.b, words[4 * i + 2] = r.c, words[4 * i + 3] = r.d;
  }
  char s[49] = {};
  std::memcpy(s, words, 48);
  std::string b(s);
  b.erase(0, b.find_first_not_of(' '));
  b.erase(b.find_last_not_of(' ') + 1);
  return b;
}
#endif

}  // namespace

bool cpu_has_x86_64_v3() {
#if defined(__x86_64__)
  const Features& f = features();
  return f.sse42 && f.popcnt && f.avx && f.avx2 && f.fma && f.bmi1 && f.bmi2 && f.f16c &&
         f.movbe && f.lzcnt && f.os_ymm;
#else
  return false;
#endif
}

bool cpu_has_x86_64_v4() {
#if defined(__x86_64__)
  const Features& f = features();
  return cpu_has_x86_64_v3() && f.avx512f && f.avx512bw && f.avx512cd && f.avx512dq &&
         f.avx512vl && f.os_zmm;
#else
  return false;
#endif
}

bool cpu_has_avx512bf16() {
#if defined(__x86_64__)
  const Features& f = features();
  return f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && f.avx512bf16 && f.os_zmm;
#else
  return false;
#endif
}

bool cpu_has_amx_bf16() {
#if defined(__x86_64__)
  const Features& f = features();
  // The packing code of the AMX path uses AVX-512 BF16.
  return cpu_has_avx512bf16() && f.amx_bf16 && f.amx_tile && f.os_tiles;
#else
  return false;
#endif
}

std::string CpuInfo::flags_line() const {
  std::string s;
  for (const auto& f : flags) s += (s.empty() ? "" : " ") + f;
  return s;
}

const CpuInfo& cpu_info() {
  static const CpuInfo info = [] {
    CpuInfo c;
#if defined(__x86_64__)
    const Regs l0 = leaf(0);
    char v[13] = {};
    std::memcpy(v, &l0.b, 4);
    std::memcpy(v + 4, &l0.d, 4);
    std::memcpy(v + 8, &l0.c, 4);
    c.vendor = v;
    c.model = brand();
    const Features& f = features();
    const std::pair<bool, const char*> named[] = {
        {f.sse42, "sse4_2"},         {f.avx, "avx"},           {f.avx2, "avx2"},
        {f.fma, "fma"},              {f.avx512f, "avx512f"},   {f.avx512bw, "avx512bw"},
        {f.avx512vl, "avx512vl"},    {f.avx512dq, "avx512dq"}, {f.avx512bf16, "avx512_bf16"},
        {f.amx_tile, "amx_tile"},    {f.amx_bf16, "amx_bf16"}};
    for (const auto& [has, name] : named)
      if (has) c.flags.push_back(name);
#else
    c.vendor = "unknown";
#endif
    if (c.model.empty()) c.model = "unknown cpu";
    return c;
  }();
  return info;
}

}  // namespace strata::kernels
