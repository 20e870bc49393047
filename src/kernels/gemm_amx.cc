// gemm_bf16 on Intel AMX (tdpbf16ps). Compiled for AMX-TILE/BF16 and AVX-512 BF16 by the
// pragma below (after the headers: their inline functions stay baseline, isa_target.h says
// why); entered only when cpuid reports AMX-BF16, the OS enables
// tile state (XCR0 bits 17-18) and Linux granted this process the tile-data permission
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), asked once).
//
// Terms: eight tiles of 16 rows x 64 bytes (palette 1): C00 C01 C10 C11 (tmm0-3, 16 x 16
// fp32 each) for a 32 x 32 block of C, A0 A1 (tmm4-5, 16 rows x 16 pairs of op(A)), B0 B1
// (tmm6-7, 16 pairs x 16 columns of op(B), the VNNI layout that pack_b writes). Per 16 pairs
// of K: 4 tile loads, 4 tdpbf16ps. op(A) is packed in the rows layout (pairs along each
// row, rows padded to 32, pairs to a multiple of 16, zeros beyond), op(B) in 64-column
// panels (gemm_bf16_pack.h). The accumulators stay in the tiles for all of K, then go
// through a 16 x 16 buffer to C with alpha, beta and the bias. Each 32 x 64 task has one
// producer and a fixed order: bit-identical for any thread count.
//
// Run on AMX: not yet by this project (no AMX CPU since the fix of the tile configuration
// above); auto uses it only after its self-check passes on the CPU at hand (selfcheck.h).
#if defined(__x86_64__)
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/memory.h"
#include "kernels/gemm_bf16_impl.h"

#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,amx-tile,amx-bf16")
#include "kernels/gemm_bf16_pack.h"

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own placeholder operands.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace strata::kernels::detail {

bool amx_permission() {
  static const bool granted = [] {
    constexpr int kGetPerm = 0x1022, kReqPerm = 0x1023, kXtileData = 18;
    if (syscall(SYS_arch_prctl, kReqPerm, kXtileData) != 0) return false;
    unsigned long mask = 0;
    if (syscall(SYS_arch_prctl, kGetPerm, &mask) != 0) return false;
    return (mask & (1ul << kXtileData)) != 0;
  }();
  return granted;
}

// The internals of the path, named apart so that tools/isa/baseline_check.py can tell
// them from baseline code.
namespace bf16_isa {
namespace {

constexpr int TR = 32;       // rows per task (two A tiles)
constexpr int NR = kNR;      // columns per task (one B panel, two 32-column halves)
constexpr int MCH = 3 * TR;  // A chunks are a multiple of this many rows

// The 64-byte operand of ldtilecfg: palette 1, every tile 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

constexpr TileConfig kTileConfig = [] {
  TileConfig c{};
  c.palette = 1;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  return c;
}();

// ldtilecfg with the whole 64-byte configuration as the asm's memory operand. GCC 12's
// _tile_loadconfig declares only 8 bytes of its operand as read, so at -O3 the stores of
// colsb and rows into a local configuration were dropped as dead: palette 1 with every tile
// unconfigured, and the first tilezero raised #UD (SIGILL). The configuration is a constant
// in memory, and the operand covers all of it.
void load_tile_config() {
  static const TileConfig cfg = kTileConfig;
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

// 16 x 16 fp32 block t (rows i0.., cols j0..) into C, clipped, with alpha, beta and bias.
void store_block(const Bf16Args& g, const float* t, int i0, int j0) {
  const int mr = std::min(16, g.M - i0), n = g.N - j0;
  if (mr <= 0 || n <= 0) return;
  const __mmask16 m = mask16(n);
  const __m512 alpha = _mm512_set1_ps(g.alpha), beta = _mm512_set1_ps(g.beta);
  for (int r = 0; r < mr; ++r) {
    float* c = g.C + int64_t(i0 + r) * g.ldc + j0;
    __m512 x = _mm512_mul_ps(alpha, _mm512_load_ps(t + 16 * r));
    if (g.beta != 0.0f) x = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(m, c), x);
    if (g.bias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, g.bias + j0));
    _mm512_mask_storeu_ps(c, m, x);
  }
}

// A 32 x 64 block of C at chunk row i (global ib + i) and panel column j0 (global).
void tile_task(const Bf16Args& g, const uint32_t* ap, int lda_p, const uint32_t* bp, int kp16,
               int row, int j0) {
  alignas(64) float buf[4][256];
  for (int half = 0; half < 2; ++half) {
    const int c = half * 32;
    if (j0 + c >= g.N) break;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int kp = 0; kp < kp16; kp += 16) {
      _tile_loadd(4, ap + kp, lda_p * 4);
      _tile_loadd(5, ap + 16 * int64_t(lda_p) + kp, lda_p * 4);
      _tile_loadd(6, bp + int64_t(kp) * NR + c, NR * 4);
      _tile_loadd(7, bp + int64_t(kp) * NR + c + 16, NR * 4);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, buf[0], 64);
    _tile_stored(1, buf[1], 64);
    _tile_stored(2, buf[2], 64);
    _tile_stored(3, buf[3], 64);
    store_block(g, buf[0], row, j0 + c);
    store_block(g, buf[1], row, j0 + c + 16);
    store_block(g, buf[2], row + 16, j0 + c);
    store_block(g, buf[3], row + 16, j0 + c + 16);
  }
}

thread_local PackScratch tl_pack;
thread_local std::vector<uint16_t> tl_rows;

}  // namespace
}  // namespace bf16_isa

void gemm_amx(const Bf16Args& g, bool parallel) {
  using namespace bf16_isa;
  const int kp16 = ((g.K + 1) / 2 + 15) / 16 * 16;  // pairs, padded for whole tiles
  const int lda_p = kp16;
  const int64_t row_bytes = int64_t(lda_p) * 4;
  const int mc = int(std::min<int64_t>(
      std::max<int64_t>(MCH, (int64_t(8) << 20) / row_bytes / MCH * MCH), (g.M + MCH - 1) / MCH * MCH));
  const int ncb = int(std::min<int64_t>(
      std::max<int64_t>(NR, (int64_t(2) << 20) / row_bytes / NR * NR), (g.N + NR - 1) / NR * NR));
  uint32_t* ap = PackScratch::get(tl_pack.a, size_t(mc) * lda_p);
  uint32_t* bpack = PackScratch::get(tl_pack.b, size_t(ncb) * kp16);
  auto panels = [&](int je, int jb) { return (je - jb + NR - 1) / NR; };
  drive(
      g, mc, ncb, mc / 16, parallel,
      [&](int ib, int q) { pack_a_rows(g, lda_p, ib, ap, q * 16, q * 16 + 16); },
      [&](int jb, int q) {
        pack_b(g, kp16, lda_p, jb + q * NR, bpack + int64_t(q) * kp16 * NR, tl_rows);
      },
      [&](int ib, int jb, int je) { return (std::min(mc, g.M - ib) + TR - 1) / TR * panels(je, jb); },
      [&](int ib, int jb, int je, int t) {
        const int np = panels(je, jb), i = (t / np) * TR, q = t % np;
        tile_task(g, ap + int64_t(i) * lda_p, lda_p, bpack + int64_t(q) * kp16 * NR, kp16, ib + i,
                  jb + q * NR);
      },
      load_tile_config, [] { _tile_release(); });
}

}  // namespace strata::kernels::detail

#else  // not x86-64: never selected (cpu_has_amx_bf16() is false)
#include "kernels/gemm_bf16_impl.h"
namespace strata::kernels::detail {
bool amx_permission() { return false; }
void gemm_amx(const Bf16Args&, bool) {}
}  // namespace strata::kernels::detail
#endif
