/* The native forward's linears on AVX2 + FMA CPUs: y = x W^T (+ bias) (+ residual), in float32
 * arithmetic, with W in float32 or bfloat16 (widened exactly as it is loaded: half the bytes to
 * stream, the same sums as on the float32 upcast).
 *
 * W is packed once, at load, into panels of 16 output columns: panel p holds W[16p .. 16p+15][k]
 * for k = 0 .. K-1, 16 values per k, contiguous. A tile of up to 6 rows of x times one panel
 * keeps its 6 x 16 sums in 12 ymm registers: per k, two loads of the panel and six broadcasts
 * of x feed twelve FMAs (BLIS's Haswell micro-kernel shape). The threads take the panels in
 * chunks as they come free; each panel's tiles walk the rows of x while the panel stays in
 * cache, so the weights stream from memory once per block of rows (all rows up to MC_MAX, as
 * in a decode step).
 * Measured on the 2-core AVX2 EPYC against oneDNN's packed fp32 linear (what the engine ran
 * before): the 121 matmuls of a SmolLM2-135M step, 1.46x faster at 1 row, 1.33x at 16-32,
 * 1.16-1.25x at 64, 1.05-1.1x at 512-2048 (bench/RESULTS.md).
 *
 * Built where the compiler targets AVX2 and FMA (else the library has no panel_gemm). On a CPU
 * with AVX-512 oneDNN has 512-bit kernels this one does not match: the engine keeps oneDNN
 * there (engine/linear.py). */
#include <stdint.h>

#include "common.h"

#define NR 16      /* output columns in a panel */
#define MR 6       /* rows of x in a tile */
#define KC_MAX 320 /* the k range of one pass: 320 x 16 floats of a panel stay in L1 */
#define MC_MAX 192 /* rows in one pass over the panels: a decode step's rows all at once */
#define MC_LARGE 144
#define PARALLEL_MIN (1 << 15) /* M * N * K below this runs on one thread */

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* The 16 weights of a panel at one k, as two vectors of 8 columns. In bfloat16 the panel holds
 * column j in the low half of 32-bit lane j and column 8 + j in its high half: a shift and a
 * mask widen them exactly (a bfloat16 is the high half of a float32), no shuffles. */
static inline __attribute__((always_inline)) void load_w(const void *w, int64_t k, int bf16,
                                                         __m256 *lo, __m256 *hi) {
  if (bf16) {
    const __m256i v = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + k * NR));
    *lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    *hi = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u)));
  } else {
    *lo = _mm256_loadu_ps((const float *)w + k * NR);
    *hi = _mm256_loadu_ps((const float *)w + k * NR + 8);
  }
}

/* A ROW(i) of the tile: its 16 sums in c##i##0, c##i##1. */
#define ROWS(ROW) ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5)

/* Rows [0, mr) of y (ldy) = those of x (ldx) times the panel wp over kc values of k, plus y
 * (more = 1, a later k range) or bias and residual (more = 0; either may be NULL). */
static inline __attribute__((always_inline)) void tile(int bf16, int mr, int kc, const float *x,
                                                       int64_t ldx, const void *wp, float *y,
                                                       int64_t ldy, int more, const float *bias,
                                                       const float *res, int64_t ldr) {
  const __m256 b0 = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
  const __m256 b1 = bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
#define INIT(i)                                                                                \
  __m256 c##i##0 = b0, c##i##1 = b1;                                                           \
  if (i < mr) {                                                                                \
    const float *from = more ? y + i * ldy : res ? res + i * ldr : 0;                          \
    if (from) {                                                                                \
      c##i##0 = _mm256_add_ps(more ? _mm256_setzero_ps() : c##i##0, _mm256_loadu_ps(from));    \
      c##i##1 = _mm256_add_ps(more ? _mm256_setzero_ps() : c##i##1, _mm256_loadu_ps(from + 8)); \
    }                                                                                          \
  }
  ROWS(INIT)
  for (int k = 0; k < kc; k++) {
    __m256 w0, w1;
    load_w(wp, k, bf16, &w0, &w1);
#define FMA(i)                                                                                 \
  if (i < mr) {                                                                                \
    const __m256 a = _mm256_broadcast_ss(x + i * ldx + k);                                     \
    c##i##0 = _mm256_fmadd_ps(a, w0, c##i##0);                                                 \
    c##i##1 = _mm256_fmadd_ps(a, w1, c##i##1);                                                 \
  }
    ROWS(FMA)
  }
#define STORE(i)                                                                               \
  if (i < mr) {                                                                                \
    _mm256_storeu_ps(y + i * ldy, c##i##0);                                                    \
    _mm256_storeu_ps(y + i * ldy + 8, c##i##1);                                                \
  }
  ROWS(STORE)
}

/* tile() compiled once per weight type and row count, the registers of absent rows left out. */
#define TILE(n)                                                                                \
  bf16 ? tile(1, n, kc, x, ldx, wp, y, ldy, more, bias, res, ldr)                              \
       : tile(0, n, kc, x, ldx, wp, y, ldy, more, bias, res, ldr)
static void tile_rows(int bf16, int mr, int kc, const float *x, int64_t ldx, const void *wp,
                      float *y, int64_t ldy, int more, const float *bias, const float *res,
                      int64_t ldr) {
  switch (mr) {
  case 6: TILE(6); break;
  case 5: TILE(5); break;
  case 4: TILE(4); break;
  case 3: TILE(3); break;
  case 2: TILE(2); break;
  default: TILE(1); break;
  }
}

/* y (M, N; row stride N) = x (M, K; row stride ldx) W^T + bias (N or NULL) + residual (M, N;
 * row stride ldr; or NULL), all float32 but wp: W packed as (N / 16, K, 16), bfloat16 if bf16
 * (its 16 columns interleaved as load_w reads them) else float32; N % 16 == 0. */
void panel_gemm(int bf16, int64_t M, int64_t N, int64_t K, const float *x, int64_t ldx,
                const void *wp, const float *bias, const float *residual, int64_t ldr, float *y,
                int num_threads) {
  const int64_t elem = bf16 ? 2 : 4;
  const int64_t panels = N / NR, mc_max = M <= MC_MAX ? M : MC_LARGE;
  const int64_t k_ranges = (K + KC_MAX - 1) / KC_MAX, kc_max = (K + k_ranges - 1) / k_ranges;
  const int64_t chunk = panel_chunk(panels, num_threads); /* to whichever thread asks next */
#pragma omp parallel num_threads(num_threads) if (M * N * K >= PARALLEL_MIN)
  for (int64_t m0 = 0; m0 < M; m0 += mc_max) {
    const int64_t m_end = m0 + mc_max < M ? m0 + mc_max : M;
#pragma omp for schedule(dynamic, chunk) nowait
    for (int64_t p = 0; p < panels; p++) {
      const char *panel = (const char *)wp + p * K * NR * elem;
      const float *b = bias ? bias + p * NR : 0;
      for (int64_t k0 = 0; k0 < K; k0 += kc_max) {
        const int kc = (int)(K - k0 < kc_max ? K - k0 : kc_max);
        for (int64_t m = m0; m < m_end; m += MR) {
          const float *r = residual ? residual + m * ldr + p * NR : 0;
          tile_rows(bf16, (int)(m_end - m < MR ? m_end - m : MR), kc, x + m * ldx + k0, ldx,
                    panel + k0 * NR * elem, y + m * N + p * NR, N, k0 > 0, b, r, ldr);
        }
      }
    }
  }
}

#endif
