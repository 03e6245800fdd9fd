/* Paged attention for decodes on a CPU: each sequence's one query attends over its own
 * blocks of the KV pool, read in place (no gathered copy, no padding to the longest context).
 *
 * Shapes (row-major, contiguous):
 *   q, out        (B, H, D)            H query heads; heads h*G .. h*G+G-1 share KV head h;
 *                                      q's rows q_stride elements apart (a view of packed qkv)
 *   k_cache, v_cache (NB, BS, Hkv, D)  the pool of one layer: a block is one contiguous row
 *   block_tables  (B, nb) int64        each sequence's blocks, in order (padding unread)
 *   context_lens  (B,) int64           keys each sequence attends to, 1 .. nb * BS
 * float32 or bfloat16 throughout; scores, softmax and sums in float32; D a multiple of 16.
 * Everything else is contiguous.
 * One pass over each sequence's blocks (online softmax), so K and V are read once, together.
 *
 * Work is split into tasks of (sequence, range of KV heads), taken from a shared counter by
 * the `num_threads` threads of one OpenMP parallel region: built with -fopenmp, this library
 * needs libgomp.so.1, which torch has loaded already, so the region runs on torch's own team.
 * Compiled with the system C compiler by engine/native_build.py; GCC >= 12 (vector extensions).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "vec.h"

typedef struct {
  int bf16;
  const void *q, *k_cache, *v_cache;
  const int64_t *block_tables, *context_lens;
  void *out;
  int64_t q_stride;
  int num_heads, num_kv_heads, head_dim, block_size, max_blocks;
  float scale;
  int heads_per_task, tasks_per_seq, num_tasks;
  int next_task; /* the shared counter */
} job_t;

/* Lane i of the result is the sum of d[i]'s VW lanes: a tree of two-input shuffles, each
 * level halving the partial sums of twice as many vectors (45 instructions for 16 sums, 21 for 8). */
static inline vf reduce_lanes(const vf *d) {
#if VW == 16
  vf a[8], b[4], c[2];
  for (int i = 0; i < 8; i++)
    a[i] = __builtin_shufflevector(d[2 * i], d[2 * i + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
           __builtin_shufflevector(d[2 * i], d[2 * i + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  for (int i = 0; i < 4; i++)
    b[i] = __builtin_shufflevector(a[2 * i], a[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
           __builtin_shufflevector(a[2 * i], a[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  for (int i = 0; i < 2; i++)
    c[i] = __builtin_shufflevector(b[2 * i], b[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29) +
           __builtin_shufflevector(b[2 * i], b[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
  return __builtin_shufflevector(c[0], c[1], 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30) +
         __builtin_shufflevector(c[0], c[1], 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
#else
  vf a[4], b[2];
  for (int i = 0; i < 4; i++)
    a[i] = __builtin_shufflevector(d[2 * i], d[2 * i + 1], 0, 1, 2, 3, 8, 9, 10, 11) +
           __builtin_shufflevector(d[2 * i], d[2 * i + 1], 4, 5, 6, 7, 12, 13, 14, 15);
  for (int i = 0; i < 2; i++)
    b[i] = __builtin_shufflevector(a[2 * i], a[2 * i + 1], 0, 1, 4, 5, 8, 9, 12, 13) +
           __builtin_shufflevector(a[2 * i], a[2 * i + 1], 2, 3, 6, 7, 10, 11, 14, 15);
  return __builtin_shufflevector(b[0], b[1], 0, 2, 4, 6, 8, 10, 12, 14) +
         __builtin_shufflevector(b[0], b[1], 1, 3, 5, 7, 9, 11, 13, 15);
#endif
}

/* Prefetches a row into L2 (locality hint 2: prefetcht1), not L1: see attend. */
static inline void prefetch_row(const void *cache, int bf16, size_t at, size_t bytes) {
  const char *p = (const char *)cache + at * (bf16 ? 2 : 4);
  for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + o, 0, 2);
}

/* One query head's q . k over head_dim = 32 C/2 bfloat16 pairs, unreduced (16 partial sums):
 * vdpbf16ps multiplies the pairs as they lie in memory, with no conversion to float32. */
static inline vf dot_bf16(const void *q, size_t q_at, const void *k, size_t k_at, const int C) {
#if HAS_DPBF16
  __m512 dot = _mm512_setzero_ps();
  for (int c = 0; c < C / 2; c++) {
    __m512bh qc = (__m512bh)_mm512_loadu_si512((const uint16_t *)q + q_at + c * 32);
    __m512bh kc = (__m512bh)_mm512_loadu_si512((const uint16_t *)k + k_at + c * 32);
    dot = _mm512_dpbf16_ps(dot, qc, kc);
  }
  return (vf)dot;
#else
  (void)q, (void)q_at, (void)k, (void)k_at, (void)C;
  return (vf){0};
#endif
}

/* KV heads h0 .. h1-1 of sequence b, in one pass over its blocks. Each tile of up to VW keys
 * (a block, or a part of a larger one) gets its VW scores per query head as one vector, then
 * an online softmax step (the running max and sum rescaled when the max grows) and its share of
 * softmax . v. While a tile's rows are read, the same rows of the next block are prefetched: a
 * few lines at a time, as a burst of a whole block would fill the core's miss buffers and
 * stall it, and into L2 (prefetch_row), which keeps more misses in flight than L1's few fill
 * buffers: the pool is read at DRAM speed while the tile before is computed. C = head_dim /
 * VW, a constant where inlined, so the loops over C unroll. */
static inline __attribute__((always_inline)) void attend(const job_t *j, int b, int h0, int h1,
                                                         const int C) {
  const int G = j->num_heads / j->num_kv_heads, D = j->head_dim, BS = j->block_size;
  const int bf16 = j->bf16, n0 = h0 * G, NH = (h1 - h0) * G;
  const int64_t L = j->context_lens[b];
  const int64_t *table = j->block_tables + (int64_t)b * j->max_blocks;
  const size_t row_elems = (size_t)j->num_kv_heads * D, block_elems = BS * row_elems;
  const size_t row_bytes = row_elems * (bf16 ? 2 : 4);
  const size_t q_at = (size_t)b * j->q_stride + (size_t)n0 * D;
  const size_t out_at = ((size_t)b * j->num_heads + n0) * D;
  const int pairs = bf16 && HAS_DPBF16 && C % 2 == 0; /* q . k by vdpbf16ps */
  vf q[NH][C], acc[NH][C];
  float max[NH], sum[NH];
  for (int n = 0; n < NH; n++) {
    max[n] = -INFINITY, sum[n] = 0.f;
    for (int c = 0; c < C; c++) {
      if (!pairs) q[n][c] = load_vec(j->q, bf16, q_at + (size_t)n * D + c * VW);
      acc[n][c] = (vf){0};
    }
  }
  const int64_t num_blocks = (L + BS - 1) / BS;
  for (int64_t blk = 0; blk < num_blocks; blk++) {
    const size_t block_at = (size_t)table[blk] * block_elems;
    const size_t next_at = blk + 1 < num_blocks ? (size_t)table[blk + 1] * block_elems : block_at;
    const int keys = L - blk * BS < BS ? (int)(L - blk * BS) : BS;
    for (int t0 = 0; t0 < keys; t0 += VW) {
      const int nt = keys - t0 < VW ? keys - t0 : VW;
      const size_t tile_at = block_at + (size_t)t0 * row_elems;
      const size_t next_tile_at = next_at + (size_t)t0 * row_elems;
      vf s[NH], dots[NH][VW];
      for (int i = 0; i < nt; i++) { /* scores: q . k of each key, unreduced */
        const size_t row = tile_at + (size_t)i * row_elems;
        prefetch_row(j->k_cache, bf16, next_tile_at + (size_t)i * row_elems, row_bytes);
        for (int h = h0; h < h1; h++) {
          const size_t at = row + (size_t)h * D;
          if (pairs) {
            for (int g = 0; g < G; g++) {
              const int n = (h - h0) * G + g;
              dots[n][i] = dot_bf16(j->q, q_at + (size_t)n * D, j->k_cache, at, C);
            }
            continue;
          }
          vf k[C];
          for (int c = 0; c < C; c++) k[c] = load_vec(j->k_cache, bf16, at + c * VW);
          for (int g = 0; g < G; g++) {
            const int n = (h - h0) * G + g;
            vf dot = q[n][0] * k[0];
            for (int c = 1; c < C; c++) dot += q[n][c] * k[c];
            dots[n][i] = dot;
          }
        }
      }
      for (int n = 0; n < NH; n++) { /* online softmax: s becomes the tile's weights */
        for (int i = nt; i < VW; i++) dots[n][i] = (vf){0};
        s[n] = reduce_lanes(dots[n]) * j->scale;
        for (int i = nt; i < VW; i++) s[n][i] = -INFINITY;
        const float m = max_lanes(s[n]);
        if (m > max[n]) {
          const float rescale = expf(max[n] - m);
          sum[n] *= rescale;
          for (int c = 0; c < C; c++) acc[n][c] *= rescale;
          max[n] = m;
        }
        s[n] = exp_lanes(s[n] - max[n]);
        for (int i = nt; i < VW; i++) s[n][i] = 0.f;
        sum[n] += sum_lanes(s[n]);
      }
      for (int i = 0; i < nt; i++) { /* out += weights . v */
        const size_t row = tile_at + (size_t)i * row_elems;
        prefetch_row(j->v_cache, bf16, next_tile_at + (size_t)i * row_elems, row_bytes);
        for (int h = h0; h < h1; h++) {
          vf v[C];
          for (int c = 0; c < C; c++) v[c] = load_vec(j->v_cache, bf16, row + (size_t)h * D + c * VW);
          for (int g = 0; g < G; g++) {
            const int n = (h - h0) * G + g;
            const float p = s[n][i];
            for (int c = 0; c < C; c++) acc[n][c] += p * v[c];
          }
        }
      }
    }
  }
  for (int n = 0; n < NH; n++)
    for (int c = 0; c < C; c++)
      store_vec(j->out, bf16, out_at + (size_t)n * D + c * VW, acc[n][c] / sum[n]);
}

static void run_task(const job_t *j, int task) {
  const int b = task / j->tasks_per_seq, part = task % j->tasks_per_seq;
  const int h0 = part * j->heads_per_task;
  int h1 = h0 + j->heads_per_task;
  if (h1 > j->num_kv_heads) h1 = j->num_kv_heads;
  switch (j->head_dim) {
    case 64: attend(j, b, h0, h1, 64 / VW); break;
    case 128: attend(j, b, h0, h1, 128 / VW); break;
    default: attend(j, b, h0, h1, j->head_dim / VW);
  }
}

static void worker(job_t *j) {
  for (;;) {
    const int task = __atomic_fetch_add(&j->next_task, 1, __ATOMIC_RELAXED);
    if (task >= j->num_tasks) break;
    run_task(j, task);
  }
}

void paged_decode(int bf16, const void *q, int64_t q_stride, const void *k_cache,
                  const void *v_cache, const int64_t *block_tables, const int64_t *context_lens,
                  void *out, int num_seqs, int num_heads, int num_kv_heads, int head_dim,
                  int block_size, int max_blocks, float scale, int num_threads) {
  job_t j = {bf16,         q,         k_cache,    v_cache,   block_tables, context_lens, out,
             q_stride,     num_heads, num_kv_heads, head_dim, block_size,  max_blocks,   scale,
             num_kv_heads, 1,         num_seqs,   0};
  if (num_threads < 1) num_threads = 1;
  /* Whole sequences (every head: each block read front to back) while there are enough of
   * them to keep every thread busy; else split their KV heads. */
  if (num_seqs < 2 * num_threads) {
    int parts = (2 * num_threads + num_seqs - 1) / num_seqs;
    if (parts > num_kv_heads) parts = num_kv_heads;
    j.heads_per_task = (num_kv_heads + parts - 1) / parts;
    j.tasks_per_seq = (num_kv_heads + j.heads_per_task - 1) / j.heads_per_task;
    j.num_tasks = num_seqs * j.tasks_per_seq;
  }
  if (num_threads > j.num_tasks) num_threads = j.num_tasks;
#pragma omp parallel num_threads(num_threads)
  worker(&j);
}
