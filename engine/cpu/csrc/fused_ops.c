/* The native forward's elementwise work, fused: one pass over memory where PyTorch makes
 * several (RMSNorm is pow, mean, rsqrt, two muls and two casts; SiLU-and-mul two ops; RoPE five
 * ops and a concatenation; the KV write two index_copy_ calls). Each op rounds where the
 * transformers modules round, so bfloat16 results match theirs up to float32 rounding:
 *
 *   rms_norm        out = w * x * rsqrt(mean(x^2) + eps); bf16: bf16(w * bf16(x * rsqrt(...)))
 *   silu_and_mul    out = silu(gate) * up of x = [gate | up]; bf16: bf16(bf16(silu(g)) * u)
 *   rope_and_cache  q and k rotated in place (x * cos + rotate_half(x) * sin, each product
 *                   rounded in bf16), then this step's k and v rows copied into the KV pool
 *   argmax          each row's index of its maximum, the first of equal maxima, or of its
 *                   first NaN if it has one: torch.max(x, dim=-1).indices (the greedy sampler)
 *
 * float32 or bfloat16 (`bf16`), float32 inside; rows split over `num_threads` threads of an
 * OpenMP region (torch's own team; see engine/native_build.py) once they are large enough to
 * pay for it. Written as scalar loops that GCC vectorizes (-O3 -march=native, `omp simd`).
 * Called by engine/fused_ops.py, which checks nothing at run time: shapes are the model's.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define PARALLEL_MIN 32768 /* elements; below, one thread (torch's grain size) */

ALWAYS_INLINE float load(const void *base, const int bf16, size_t i) {
  return bf16 ? from_bf16(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

ALWAYS_INLINE void store(void *base, const int bf16, size_t i, float x) {
  if (bf16)
    ((uint16_t *)base)[i] = to_bf16(x);
  else
    ((float *)base)[i] = x;
}

ALWAYS_INLINE void rms_norm_row(const void *x, const void *w, void *out, size_t at, int cols,
                                float eps, const int bf16) {
  float squares = 0.f;
#pragma omp simd reduction(+ : squares)
  for (int c = 0; c < cols; c++) {
    const float v = load(x, bf16, at + c);
    squares += v * v;
  }
  const float inv = 1.f / sqrtf(squares / cols + eps);
#pragma omp simd
  for (int c = 0; c < cols; c++) {
    const float h = load(x, bf16, at + c) * inv;
    store(out, bf16, at + c, load(w, bf16, c) * (bf16 ? round_bf16(h) : h));
  }
}

void fused_rms_norm(int bf16, const void *x, const void *w, void *out, int rows, int cols,
                    float eps, int num_threads) {
#pragma omp parallel for num_threads(num_threads) if ((int64_t)rows * cols >= PARALLEL_MIN)
  for (int r = 0; r < rows; r++) {
    if (bf16)
      rms_norm_row(x, w, out, (size_t)r * cols, cols, eps, 1);
    else
      rms_norm_row(x, w, out, (size_t)r * cols, cols, eps, 0);
  }
}

ALWAYS_INLINE void silu_and_mul_row(const void *x, void *out, size_t row, int cols,
                                    const int bf16) {
  const size_t in_at = row * 2 * cols, out_at = row * cols;
#pragma omp simd
  for (int c = 0; c < cols; c++) {
    const float g = load(x, bf16, in_at + c), u = load(x, bf16, in_at + cols + c);
    const float silu = g / (1.f + exp_approx(-g));
    store(out, bf16, out_at + c, (bf16 ? round_bf16(silu) : silu) * u);
  }
}

void fused_silu_and_mul(int bf16, const void *x, void *out, int rows, int cols, int num_threads) {
#pragma omp parallel for num_threads(num_threads) if ((int64_t)rows * cols >= PARALLEL_MIN)
  for (int r = 0; r < rows; r++) {
    if (bf16)
      silu_and_mul_row(x, out, r, cols, 1);
    else
      silu_and_mul_row(x, out, r, cols, 0);
  }
}

/* Heads h of one token's row, at x + at + h * D: each rotated in place by cos and sin (D,). */
ALWAYS_INLINE void rotate_heads(void *x, size_t at, int heads, int D, const void *cos,
                                const void *sin, size_t cs_at, const int bf16) {
  const int half = D / 2;
  for (int h = 0; h < heads; h++) {
    const size_t head_at = at + (size_t)h * D;
#pragma omp simd
    for (int i = 0; i < half; i++) {
      const float x1 = load(x, bf16, head_at + i), x2 = load(x, bf16, head_at + half + i);
      const float c1 = load(cos, bf16, cs_at + i), c2 = load(cos, bf16, cs_at + half + i);
      const float s1 = load(sin, bf16, cs_at + i), s2 = load(sin, bf16, cs_at + half + i);
      float o1, o2;
      if (bf16) {
        o1 = round_bf16(round_bf16(x1 * c1) - round_bf16(x2 * s1));
        o2 = round_bf16(round_bf16(x2 * c2) + round_bf16(x1 * s2));
      } else {
        o1 = x1 * c1 - x2 * s1;
        o2 = x2 * c2 + x1 * s2;
      }
      store(x, bf16, head_at + i, o1);
      store(x, bf16, head_at + half + i, o2);
    }
  }
}

ALWAYS_INLINE void rope_and_cache_token(void *q, int64_t q_stride, void *k, int64_t k_stride,
                                        const void *v, int64_t v_stride, const void *cos,
                                        const void *sin, int t, int H, int Hkv, int D,
                                        void *k_cache, void *v_cache, int64_t slot,
                                        const int bf16) {
  const size_t cs_at = (size_t)t * D, row = (size_t)Hkv * D, elem = bf16 ? 2 : 4;
  rotate_heads(q, (size_t)t * q_stride, H, D, cos, sin, cs_at, bf16);
  rotate_heads(k, (size_t)t * k_stride, Hkv, D, cos, sin, cs_at, bf16);
  memcpy((char *)k_cache + slot * row * elem, (char *)k + t * k_stride * elem, row * elem);
  memcpy((char *)v_cache + slot * row * elem, (const char *)v + t * v_stride * elem, row * elem);
}

/* q (T, H, D), k and v (T, Hkv, D): rows `*_stride` elements apart, a row's heads side by
 * side; cos and sin (T, D); k_cache and v_cache (slots, Hkv, D); slots (T,) int64. */
void fused_rope_and_cache(int bf16, void *q, int64_t q_stride, void *k, int64_t k_stride,
                          const void *v, int64_t v_stride, const void *cos, const void *sin, int T,
                          int H, int Hkv, int D, void *k_cache, void *v_cache,
                          const int64_t *slots, int num_threads) {
#pragma omp parallel for num_threads(num_threads) if ((int64_t)T * (H + Hkv) * D >= PARALLEL_MIN)
  for (int t = 0; t < T; t++) {
    if (bf16)
      rope_and_cache_token(q, q_stride, k, k_stride, v, v_stride, cos, sin, t, H, Hkv, D,
                           k_cache, v_cache, slots[t], 1);
    else
      rope_and_cache_token(q, q_stride, k, k_stride, v, v_stride, cos, sin, t, H, Hkv, D,
                           k_cache, v_cache, slots[t], 0);
  }
}

/* The row's max in a vector pass (NaN noticed, not compared), then the first index holding it:
 * the row is in L2 for the second pass. */
ALWAYS_INLINE int64_t argmax_row(const void *x, size_t at, int cols, const int bf16) {
  float best = -INFINITY;
  int nan = 0;
#pragma omp simd reduction(max : best) reduction(| : nan)
  for (int c = 0; c < cols; c++) {
    const float v = load(x, bf16, at + c);
    nan |= v != v;
    best = v > best ? v : best;
  }
  for (int c = 0; c < cols; c++) {
    const float v = load(x, bf16, at + c);
    if (nan ? v != v : v == best)
      return c;
  }
  return 0; /* cols == 0 */
}

/* x (rows, cols) contiguous -> out (rows,) int64. */
void fused_argmax(int bf16, const void *x, int64_t *out, int rows, int cols, int num_threads) {
#pragma omp parallel for num_threads(num_threads) if ((int64_t)rows * cols >= PARALLEL_MIN)
  for (int r = 0; r < rows; r++) {
    const size_t at = (size_t)r * cols;
    out[r] = bf16 ? argmax_row(x, at, cols, 1) : argmax_row(x, at, cols, 0);
  }
}
