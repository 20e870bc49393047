// Scalar math written so the compiler vectorises it (no per-ISA intrinsics, no -ffast-math):
// loops calling these inline functions become SIMD on any target. Results are the same run
// to run; partial sums use a fixed number of lanes (16), not the machine's vector width.
//
// exp: Cody-Waite range reduction x = n*ln2 + r, |r| <= ln2/2, then a degree-6 polynomial
// for e^r (Cephes expf coefficients), scaled by 2^n through the exponent bits. About 1-2 ulp
// on [-87.3, 88.7]; below -87.3 it returns exactly 0 (what a softmax over masked entries
// needs), above it saturates at e^88.7.
// Cost: ~12 flops per element, no table lookups.
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace strata::kernels {

inline float fast_exp(float x) {
  const float xc = std::min(std::max(x, -87.3f), 88.7f);
  // Round to nearest by the 1.5 * 2^23 trick (std::floor/nearbyint do not vectorise without
  // -ffast-math style flags); exact for |x * log2 e| < 2^22.
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (int32_t(n) + 127) << 23;
  const float result = p * std::bit_cast<float>(bits);
  return x < -87.3f ? 0.0f : result;
}

// tanh(u) = 1 - 2 / (e^{2u} + 1): exact limits +-1, absolute error ~1e-7 near 0.
inline float fast_tanh(float u) { return 1.0f - 2.0f / (fast_exp(2.0f * u) + 1.0f); }

// Sum of n floats with 16 independent partial sums combined in a fixed order: vectorises
// without reassociation flags and gives the same bits on every machine and thread count.
inline float sum16(const float* x, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] += x[i + k];
  for (int k = 0; i < n; ++i, ++k) acc[k] += x[i];
  for (int w = 8; w >= 1; w /= 2)
    for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
  return acc[0];
}

// Dot product with the same fixed partial-sum scheme as sum16.
inline float dot16(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] += a[i + k] * b[i + k];
  for (int k = 0; i < n; ++i, ++k) acc[k] += a[i] * b[i];
  for (int w = 8; w >= 1; w /= 2)
    for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
  return acc[0];
}

// sum of exp(x[i] - shift) with the same fixed partial-sum scheme (softmax denominators).
inline float sum_exp16(const float* x, int64_t n, float shift) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] += fast_exp(x[i + k] - shift);
  for (int k = 0; i < n; ++i, ++k) acc[k] += fast_exp(x[i] - shift);
  for (int w = 8; w >= 1; w /= 2)
    for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
  return acc[0];
}

// Maximum (exact in any order, so lanes change nothing but speed). NaN-free input.
inline float max16(const float* x, int64_t n) {
  float acc[16];
  for (int k = 0; k < 16; ++k) acc[k] = -INFINITY;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] = acc[k] > x[i + k] ? acc[k] : x[i + k];
  for (int k = 0; i < n; ++i, ++k) acc[k] = acc[k] > x[i] ? acc[k] : x[i];
  for (int w = 8; w >= 1; w /= 2)
    for (int k = 0; k < w; ++k) acc[k] = acc[k] > acc[k + w] ? acc[k] : acc[k + w];
  return acc[0];
}

// One row of an online softmax (FlashAttention-2): the scores s[lo, valid) of a key tile join
// the row's running max m and sum l; s becomes exp(s - m_new) there and 0 elsewhere (up to
// nk), and the row's partial output o (hs) is rescaled when the max grew. lo > 0 hides the
// keys before the row's document (kernels/attention.h); lo < valid.
inline void online_softmax_row(float* s, int lo, int valid, int nk, float& m, float& l, float* o,
                               int hs) {
  const float m_new = std::max(m, max16(s + lo, valid - lo));
  const float corr = m == -INFINITY ? 0.0f : fast_exp(m - m_new);
  for (int j = 0; j < lo; ++j) s[j] = 0.0f;
  for (int j = lo; j < valid; ++j) s[j] = fast_exp(s[j] - m_new);
  for (int j = valid; j < nk; ++j) s[j] = 0.0f;
  l = l * corr + sum16(s + lo, valid - lo);
  m = m_new;
  if (corr != 1.0f)
    for (int d = 0; d < hs; ++d) o[d] *= corr;
}

}  // namespace strata::kernels
