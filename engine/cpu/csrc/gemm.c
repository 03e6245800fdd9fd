/* The native forward's float32 linears: y = x W^T (+ bias) (+ residual), in float32
 * arithmetic, with W in float32 or bfloat16 (widened exactly as it is loaded: half the bytes to
 * stream, the same sums as on the float32 upcast). Built for the widest vectors the compiler
 * targets: AVX-512 (zmm, 32-column panels, 12-row tiles) or AVX2 + FMA (ymm, 16 and 6).
 *
 * W is packed once, at load, into panels of NR = 2 vectors of output columns: panel p holds
 * W[NR p .. NR p + NR - 1][k] for k = 0 .. K-1, NR values per k, contiguous. A tile of up to MR
 * rows of x times one panel keeps its MR x NR sums in 2 MR registers: per k, two loads of the
 * panel and MR broadcasts of x feed 2 MR FMAs (BLIS's micro-kernel shape). The threads take the
 * panels in chunks as they come free; each panel's tiles walk the rows of x while the panel
 * stays in cache, so the weights stream from memory once per block of rows (all rows up to
 * MC_MAX, as in a decode step).
 * With AVX-512 the whole k range goes in one pass; with AVX2 it is split into passes of KC_MAX
 * (a panel's slice then stays in L1). Against oneDNN's packed linear: bench/RESULTS.md. */
#include <stdint.h>
#include <string.h>

#include "common.h"

#define MC_MAX 192 /* rows in one pass over the panels: a decode step's rows all at once */
#define MC_LARGE 144
#define PARALLEL_MIN (1 << 15) /* M * N * K below this runs on one thread */

#if defined(__AVX512F__)
#include <immintrin.h>
#define VL 16 /* floats to a vector */
#define MR 12 /* rows of x in a tile: 24 sums and 2 weights of the 32 zmm */
#define KC_MAX INT32_MAX /* the whole of k in one pass: a panel of K = 1536 (192 KiB) stays in L2 */
typedef __m512 vec;
#define vload _mm512_loadu_ps
#define vstore _mm512_storeu_ps
#define vfma _mm512_fmadd_ps
#define vadd _mm512_add_ps
#define vzero _mm512_setzero_ps
#define vset1 _mm512_set1_ps
#define HAS_PANELS 1
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define VL 8
#define MR 6 /* 12 sums and 2 weights of the 16 ymm */
#define KC_MAX 320 /* the k range of one pass: 320 x 16 floats of a panel (20 KiB) stay in L1 */
typedef __m256 vec;
#define vload _mm256_loadu_ps
#define vstore _mm256_storeu_ps
#define vfma _mm256_fmadd_ps
#define vadd _mm256_add_ps
#define vzero _mm256_setzero_ps
#define vset1 _mm256_set1_ps
#define HAS_PANELS 1
#endif

#ifdef HAS_PANELS
#define NR (2 * VL)             /* output columns in a panel */

int panel_gemm_width(void) { return NR; }

typedef uint32_t lanes __attribute__((vector_size(sizeof(vec)))); /* vec's 32-bit lanes */

/* The NR bfloat16 weights of a panel at one k as two vectors: column j in the low half of
 * 32-bit lane j, column VL + j in its high half, so a shift and a mask widen them exactly (a
 * bfloat16 is the high half of a float32), no shuffles. */
static inline __attribute__((always_inline)) void widen(const uint16_t *w, vec *lo, vec *hi) {
  lanes v;
  memcpy(&v, w, sizeof v);
  *lo = (vec)(v << 16);
  *hi = (vec)(v & 0xffff0000u);
}

static inline __attribute__((always_inline)) void load_w(const void *w, int64_t k, int bf16,
                                                         vec *lo, vec *hi) {
  if (bf16) {
    widen((const uint16_t *)w + k * NR, lo, hi);
  } else {
    *lo = vload((const float *)w + k * NR);
    *hi = vload((const float *)w + k * NR + VL);
  }
}

/* Rows [0, mr) of y (ldy) = those of x (ldx) times the panel wp over kc values of k, plus y
 * (more = 1, a later k range) or bias and residual (more = 0; either may be NULL). */
static inline __attribute__((always_inline)) void tile(int bf16, int mr, int kc, const float *x,
                                                       int64_t ldx, const void *wp, float *y,
                                                       int64_t ldy, int more, const float *bias,
                                                       const float *res, int64_t ldr) {
  const vec b0 = bias ? vload(bias) : vzero(), b1 = bias ? vload(bias + VL) : vzero();
  vec c0[MR], c1[MR];
  for (int i = 0; i < mr; i++) {
    c0[i] = b0, c1[i] = b1;
    const float *from = more ? y + i * ldy : res ? res + i * ldr : 0;
    if (from) {
      c0[i] = vadd(more ? vzero() : c0[i], vload(from));
      c1[i] = vadd(more ? vzero() : c1[i], vload(from + VL));
    }
  }
  for (int k = 0; k < kc; k++) {
    vec w0, w1;
    load_w(wp, k, bf16, &w0, &w1);
    for (int i = 0; i < mr; i++) {
      const vec a = vset1(x[i * ldx + k]);
      c0[i] = vfma(a, w0, c0[i]);
      c1[i] = vfma(a, w1, c1[i]);
    }
  }
  for (int i = 0; i < mr; i++) {
    vstore(y + i * ldy, c0[i]);
    vstore(y + i * ldy + VL, c1[i]);
  }
}

/* tile() compiled once per weight type and row count, the registers of absent rows left out. */
#define TILE(n)                                                                                \
  case n:                                                                                      \
    if (bf16)                                                                                  \
      tile(1, n, kc, x, ldx, wp, y, ldy, more, bias, res, ldr);                                \
    else                                                                                       \
      tile(0, n, kc, x, ldx, wp, y, ldy, more, bias, res, ldr);                                \
    break;
static void tile_rows(int bf16, int mr, int kc, const float *x, int64_t ldx, const void *wp,
                      float *y, int64_t ldy, int more, const float *bias, const float *res,
                      int64_t ldr) {
  switch (mr) {
#if MR > 6
    TILE(12) TILE(11) TILE(10) TILE(9) TILE(8) TILE(7)
#endif
    TILE(6) TILE(5) TILE(4) TILE(3) TILE(2) TILE(1)
  }
}
#undef TILE

/* y (M, N; row stride N) = x (M, K; row stride ldx) W^T + bias (N or NULL) + residual (M, N;
 * row stride ldr; or NULL), all float32 but wp: W packed as (N / NR, K, NR), bfloat16 if bf16
 * (its NR columns interleaved as widen reads them) else float32; N % NR == 0. */
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
