/* The native forward's bfloat16 linears on CPUs with AVX512_BF16: y = x W^T (+ bias), x, W and
 * y in bfloat16, the sums in float32 (vdpbf16ps: each product exact, the sum of a pair of
 * them rounded to float32 as it is added, as oneDNN's bfloat16 kernels compute), rounded to
 * bfloat16 once at the end (to nearest even, as oneDNN rounds).
 *
 * Why not oneDNN, which is as fast here when it has the machine to itself: oneDNN splits a
 * matmul's work between its threads in equal shares fixed before it starts. On two cores, the
 * server's event loop or a client on the same machine takes one core for a few milliseconds a
 * step; the thread that lost it still owes its whole share while the other waits at the end.
 * Here the threads take the panels in small chunks as they come free, so a thread that loses
 * its core leaves the rest of the work to the other (csrc/gemm.c does the same with 256-bit
 * float32 arithmetic).
 *
 * W is packed once, at load, into panels of 32 output columns: panel p holds, for each pair of
 * k (2j, 2j + 1), the 32 columns' two weights side by side, 64 bfloat16 in two vectors of 16
 * pairs, contiguous along k. A tile of up to MR rows of x times a panel keeps its MR x 32 sums
 * in 2 MR zmm registers: per pair of k, two loads of the panel and MR broadcasts of x's pair
 * feed 2 MR vdpbf16ps. The whole of k in one pass (a panel of K = 1536 is 96 KiB, read from
 * L2 by the tiles after the first); the rows go in blocks of MC rows so that x's block stays
 * in L2 while the panels stream through. */
#include <stdint.h>
#include <string.h>

#include "common.h"

#define NR 32  /* output columns in a panel */
#define MR 12  /* rows of x in a tile: 24 sums, 2 weights and a broadcast of the 32 zmm */
#define MC 256 /* rows in one pass over the panels: their block of x (up to 768 KiB) stays in L2 */
#define PARALLEL_MIN (1 << 15) /* M * N * K below this runs on one thread */

#if defined(__AVX512F__) && defined(__AVX512BF16__)
#include <immintrin.h>

/* x's two bfloat16 at k = 2j, 2j + 1, in every 32-bit lane. */
static inline __attribute__((always_inline)) __m512bh pair(const uint16_t *x) {
  int32_t v;
  memcpy(&v, x, sizeof v);
  return (__m512bh)_mm512_set1_epi32(v);
}

static inline __attribute__((always_inline)) void store(uint16_t *y, __m512 sums,
                                                        const float *bias) {
  if (bias)
    sums = _mm512_add_ps(sums, _mm512_loadu_ps(bias));
  _mm256_storeu_si256((__m256i *)y, (__m256i)_mm512_cvtneps_pbh(sums));
}

static inline __attribute__((always_inline)) void tile(int n, int64_t K, const uint16_t *x,
                                                       int64_t ldx, const uint16_t *panel,
                                                       uint16_t *y, int64_t ldy,
                                                       const float *bias) {
  __m512 lo[MR], hi[MR];
  for (int r = 0; r < n; r++)
    lo[r] = hi[r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; k += 2) {
    const __m512bh w_lo = (__m512bh)_mm512_loadu_si512(panel + k * NR);
    const __m512bh w_hi = (__m512bh)_mm512_loadu_si512(panel + k * NR + NR);
    for (int r = 0; r < n; r++) {
      const __m512bh xr = pair(x + r * ldx + k);
      lo[r] = _mm512_dpbf16_ps(lo[r], xr, w_lo);
      hi[r] = _mm512_dpbf16_ps(hi[r], xr, w_hi);
    }
  }
  for (int r = 0; r < n; r++) {
    store(y + r * ldy, lo[r], bias);
    store(y + r * ldy + NR / 2, hi[r], bias ? bias + NR / 2 : 0);
  }
}

/* A block's rows in tiles of 12, then at most one each of 8, 4, 2 and 1 rows: tile() compiled
 * for five row counts, the registers of absent rows left out. */
static void tile_rows(int64_t rows, int64_t K, const uint16_t *x, int64_t ldx,
                      const uint16_t *panel, uint16_t *y, int64_t ldy, const float *bias) {
  int64_t m = 0;
#define TILE(n)                                                                                \
  for (; rows - m >= n; m += n)                                                                \
  tile(n, K, x + m * ldx, ldx, panel, y + m * ldy, ldy, bias)
  TILE(MR);
  TILE(8);
  TILE(4);
  TILE(2);
  TILE(1);
#undef TILE
}

/* y (M, N; row stride N) = x (M, K; row stride ldx) W^T + bias (N float32, or NULL): x, y in
 * bfloat16; wp: W packed as (N / 32, K / 2, 32, 2) bfloat16; N % 32 == 0, K and ldx even. */
void panel_gemm_bf16(int64_t M, int64_t N, int64_t K, const uint16_t *x, int64_t ldx,
                     const uint16_t *wp, const float *bias, uint16_t *y, int num_threads) {
  const int64_t panels = N / NR;
  const int64_t chunk = panel_chunk(panels, num_threads); /* to whichever thread asks next */
#pragma omp parallel num_threads(num_threads) if (M * N * K >= PARALLEL_MIN)
  for (int64_t m0 = 0; m0 < M; m0 += MC) {
    const int64_t rows = M - m0 < MC ? M - m0 : MC;
#pragma omp for schedule(dynamic, chunk) nowait
    for (int64_t p = 0; p < panels; p++)
      tile_rows(rows, K, x + m0 * ldx, ldx, wp + p * K * NR, y + m0 * N + p * NR, N,
                bias ? bias + p * NR : 0);
  }
}

#endif
