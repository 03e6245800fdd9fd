/* The native forward's linears at one row (a decode step of one sequence): y = W x (+ bias)
 * (+ residual), float32 sums, on the model's own weights where they lie.
 *
 * At one row a linear streams its weights once, each value used once: its time is the bytes
 * over memory bandwidth. oneDNN's packed kernels stay well short of it (bench/RESULTS.md); a
 * stream read front to back comes closer. The
 * loader stores each nn.Linear weight (out, in) as the transpose of a contiguous (in, out)
 * tensor (engine/loader.py): row k of it holds input k's weight for every output, and a block
 * of rows is one run of memory. So the threads split k: each takes a piece of rows as one comes
 * free and adds x[k] times row k into its own float32 sums of the outputs; then the threads add
 * up their sums. A narrow piece is read one row at a time, front to back; a wide one (the LM
 * head) in tiles of columns four rows at a time, so its sums, in L2, move a quarter as often.
 * The parts of a fused projection (q, k, v; gate, up) are separate tensors: one call takes them
 * all and writes them side by side into y.
 *
 * x, y and bias are float32 or bfloat16 as the weights (`bf16`); y in bfloat16 is the float32
 * sum rounded once, as oneDNN's. The residual, where given, is float32 (the engine fuses the
 * residual add in float32 only). Every part's width is a multiple of 16 (engine/linear.py). */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "vec.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define MAX_PARTS 4
#define PIECES_PER_THREAD 4 /* each part's rows in this many pieces a thread, some to spare */
#define PIECE_ALIGN 16      /* rows */
#define TILE_N 16384        /* columns of a task at most */
#define WIDE_COLS 4096      /* a task this wide reads WIDE_STEP rows at a time */
#define WIDE_STEP 4

/* sums[0, cols) (+)= x[k0 .. k1) times columns [0, cols) of rows k0 .. k1 of w (row stride ldw
 * elements), `step` rows at a time; `first` writes instead of adding. */
ALWAYS_INLINE void add_rows(const int bf16, const int step, const float *x, const char *w,
                            int64_t ldw, int64_t cols, int64_t k0, int64_t k1, float *sums,
                            int first) {
  const int64_t row_bytes = ldw * (bf16 ? 2 : 4);
  for (int64_t k = k0; k < k1; k += step) {
    const int steps = k1 - k < step ? (int)(k1 - k) : step;
    float a[WIDE_STEP]; /* x's values held once a row: the compiler cannot, sums may alias x */
    for (int s = 0; s < steps; s++) a[s] = x[k + s];
    for (int64_t c = 0; c < cols; c += VW) {
      vf acc = (vf){0};
      if (!first || k > k0) memcpy(&acc, sums + c, sizeof acc);
      for (int s = 0; s < step; s++)
        if (s < steps) acc += a[s] * load_vec(w + (k + s) * row_bytes, bf16, (size_t)c);
      memcpy(sums + c, &acc, sizeof acc);
    }
  }
}

static void add_rows_any(int bf16, const float *x, const char *w, int64_t ldw, int64_t cols,
                         int64_t k0, int64_t k1, float *sums, int first) {
  const int wide = cols >= WIDE_COLS; /* constant arguments: four specialised loops */
  if (bf16)
    wide ? add_rows(1, WIDE_STEP, x, w, ldw, cols, k0, k1, sums, first)
         : add_rows(1, 1, x, w, ldw, cols, k0, k1, sums, first);
  else
    wide ? add_rows(0, WIDE_STEP, x, w, ldw, cols, k0, k1, sums, first)
         : add_rows(0, 1, x, w, ldw, cols, k0, k1, sums, first);
}

/* y (N) = [W_0 | W_1 | ...] x (K) + bias (N or NULL) + residual (N, float32, or NULL), where
 * part p's weight is w[p]: (K, n[p]) contiguous, n[p] % 16 == 0, N = sum n[p], parts <= 4.
 * Returns 0, or -1 if it could not allocate its scratch (y is then not written). */
int gemv_split_k(int bf16, int64_t K, int parts, const void *const *w, const int64_t *n,
                  const void *x, const void *bias, const float *residual, void *y,
                  int num_threads) {
  /* the tasks: (part, tile of columns, piece of rows), part by part */
  int64_t N = 0, offset[MAX_PARTS], tiles[MAX_PARTS], first_task[MAX_PARTS + 1] = {0};
  const int64_t per = K / (PIECES_PER_THREAD * num_threads), /* rows a piece, rounded up */
      rows = per > PIECE_ALIGN ? (per + PIECE_ALIGN - 1) / PIECE_ALIGN * PIECE_ALIGN : PIECE_ALIGN,
      pieces = (K + rows - 1) / rows;
  int64_t all_tiles = 0;
  for (int p = 0; p < parts; p++) {
    offset[p] = N, N += n[p];
    tiles[p] = (n[p] + TILE_N - 1) / TILE_N;
    first_task[p + 1] = first_task[p] + tiles[p] * pieces;
    all_tiles += tiles[p];
  }
  /* the threads' sums, x in float32, and which sums each thread wrote: after the first call
   * malloc serves this from its heap (glibc raises its mmap threshold past a freed block);
   * aligned, or every vector of sums read and written spans two cache lines */
  const size_t bytes =
      sizeof(float) * (size_t)(num_threads * N + K) + (size_t)(num_threads * all_tiles);
  float *scratch = aligned_alloc(64, (bytes + 63) / 64 * 64); /* whole lines: vectors of sums */
  if (!scratch) return -1;
  float *sums_all = scratch, *xf = scratch + num_threads * N;
  char *took = (char *)(xf + K); /* took[t * all_tiles + tile]: thread t has sums there */
  memset(took, 0, (size_t)num_threads * all_tiles);
  for (int64_t i = 0; i < K; i++)
    xf[i] = bf16 ? from_bf16(((const uint16_t *)x)[i]) : ((const float *)x)[i];
#pragma omp parallel num_threads(num_threads)
  {
    const int t = omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < first_task[parts]; task++) {
      int p = 0, tile_base = 0;
      while (task >= first_task[p + 1]) tile_base += tiles[p], p++;
      const int64_t tile = (task - first_task[p]) / pieces, j0 = tile * TILE_N,
                    cols = n[p] - j0 < TILE_N ? n[p] - j0 : TILE_N,
                    k0 = (task - first_task[p]) % pieces * rows, k1 = k0 + rows < K ? k0 + rows : K;
      char *mine = took + t * all_tiles + tile_base + tile;
      add_rows_any(bf16, xf, (const char *)w[p] + j0 * (bf16 ? 2 : 4), n[p], cols, k0, k1,
                   sums_all + t * N + offset[p] + j0, !*mine);
      *mine = 1;
    }
    /* past the loop's barrier every thread's sums are complete */
#pragma omp for schedule(static)
    for (int64_t j = 0; j < N; j += VW) {
      int p = 0, tile_base = 0;
      while (p + 1 < parts && j >= offset[p + 1]) tile_base += tiles[p], p++;
      const int64_t tile = tile_base + (j - offset[p]) / TILE_N;
      vf s = (vf){0};
      for (int u = 0; u < num_threads; u++)
        if (took[u * all_tiles + tile]) {
          vf part;
          memcpy(&part, sums_all + u * N + j, sizeof part);
          s += part;
        }
      if (bias) s += load_vec(bias, bf16, (size_t)j);
      if (residual) s += load_vec(residual, 0, (size_t)j);
      store_vec(y, bf16, (size_t)j, s);
    }
  }
  free(scratch);
  return 0;
}
