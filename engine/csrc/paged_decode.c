/* Paged attention for decodes on a CPU: each sequence's one query attends over its own
 * blocks of the KV pool, read in place (no gathered copy, no padding to the longest context).
 *
 * Shapes (row-major, contiguous):
 *   q, out        (B, H, D)            H query heads; heads h*G .. h*G+G-1 share KV head h
 *   k_cache, v_cache (NB, BS, Hkv, D)  the pool of one layer: a block is one contiguous row
 *   block_tables  (B, nb) int64        each sequence's blocks, in order (padding unread)
 *   context_lens  (B,) int64           keys each sequence attends to, 1 .. nb * BS
 * float32 or bfloat16 throughout; scores, softmax and sums in float32; D a multiple of 16.
 *
 * Work is split into tasks of (sequence, range of KV heads), taken from a shared counter by
 * the `num_threads` threads of one OpenMP parallel region: built with -fopenmp, this library
 * needs libgomp.so.1, which torch has loaded already, so the region runs on torch's own team.
 * Compiled with the system C compiler by engine/paged_kernel.py; GCC >= 12 (vector extensions).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef float v16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));
typedef uint16_t v16h __attribute__((vector_size(32)));
typedef uint32_t v16u __attribute__((vector_size(64)));

typedef struct {
  int bf16;
  const void *q, *k_cache, *v_cache;
  const int64_t *block_tables, *context_lens;
  void *out;
  int num_heads, num_kv_heads, head_dim, block_size, max_blocks;
  float scale;
  int heads_per_task, tasks_per_seq, num_tasks;
  int next_task; /* the shared counter */
} job_t;

static inline v16 load16(const void *base, int bf16, size_t i) {
  v16 f;
  if (bf16) { /* a bfloat16 is the high half of a float32 */
    v16h h;
    memcpy(&h, (const uint16_t *)base + i, sizeof h);
    v16u u = __builtin_convertvector(h, v16u) << 16;
    memcpy(&f, &u, sizeof f);
  } else {
    memcpy(&f, (const float *)base + i, sizeof f);
  }
  return f;
}

static inline uint16_t to_bf16(float f) { /* round to nearest even, as torch does */
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

static inline void store16(void *base, int bf16, size_t i, v16 x) {
  if (bf16) {
    for (int k = 0; k < 16; k++) ((uint16_t *)base)[i + k] = to_bf16(x[k]);
  } else {
    memcpy((float *)base + i, &x, sizeof x);
  }
}

static inline float sum16(v16 x) {
  v8 a = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7) +
         __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
  v4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  return (b[0] + b[2]) + (b[1] + b[3]);
}

/* Where key l's row (all KV heads) starts in `cache`, in elements; at the first key of a
 * block, the next block of the table is prefetched. */
static inline size_t key_row(const job_t *j, const void *cache, const int64_t *table, int64_t l,
                             int64_t len) {
  const int BS = j->block_size;
  const size_t row_elems = (size_t)j->num_kv_heads * j->head_dim;
  if (l % BS == 0 && l + BS < len) {
    const size_t block_bytes = BS * row_elems * (j->bf16 ? 2 : 4);
    const char *next = (const char *)cache + (size_t)table[l / BS + 1] * block_bytes;
    for (size_t o = 0; o < block_bytes; o += 64) __builtin_prefetch(next + o);
  }
  return ((size_t)table[l / BS] * BS + l % BS) * row_elems;
}

/* KV heads h0 .. h1-1 of sequence b. C = head_dim / 16, a constant where inlined, so the
 * loops over C unroll and the vectors stay in registers. `scores` holds (heads, len). */
static inline __attribute__((always_inline)) void attend(const job_t *j, int b, int h0, int h1,
                                                         float *scores, const int C) {
  const int G = j->num_heads / j->num_kv_heads, D = j->head_dim;
  const int bf16 = j->bf16, n0 = h0 * G, NH = (h1 - h0) * G;
  const int64_t L = j->context_lens[b];
  const int64_t *table = j->block_tables + (int64_t)b * j->max_blocks;
  const size_t q_at = ((size_t)b * j->num_heads + n0) * D;
  v16 q[NH][C], acc[NH][C];
  float max[NH], inv_sum[NH];
  for (int n = 0; n < NH; n++) {
    max[n] = -INFINITY;
    for (int c = 0; c < C; c++) q[n][c] = load16(j->q, bf16, q_at + (size_t)n * D + c * 16) * j->scale;
  }
  for (int64_t l = 0; l < L; l++) { /* scores = q . k */
    const size_t row = key_row(j, j->k_cache, table, l, L);
    for (int h = h0; h < h1; h++) {
      v16 k[C];
      for (int c = 0; c < C; c++) k[c] = load16(j->k_cache, bf16, row + (size_t)h * D + c * 16);
      for (int g = 0; g < G; g++) {
        const int n = (h - h0) * G + g;
        v16 dot = q[n][0] * k[0];
        for (int c = 1; c < C; c++) dot += q[n][c] * k[c];
        const float s = sum16(dot);
        scores[n * L + l] = s;
        max[n] = s > max[n] ? s : max[n];
      }
    }
  }
  for (int n = 0; n < NH; n++) { /* softmax, normalised at the end */
    float *s = scores + n * L, sum = 0.f;
    for (int64_t l = 0; l < L; l++) {
      s[l] = expf(s[l] - max[n]);
      sum += s[l];
    }
    inv_sum[n] = 1.f / sum;
    for (int c = 0; c < C; c++) acc[n][c] = (v16){0};
  }
  for (int64_t l = 0; l < L; l++) { /* out = softmax . v */
    const size_t row = key_row(j, j->v_cache, table, l, L);
    for (int h = h0; h < h1; h++) {
      v16 v[C];
      for (int c = 0; c < C; c++) v[c] = load16(j->v_cache, bf16, row + (size_t)h * D + c * 16);
      for (int g = 0; g < G; g++) {
        const int n = (h - h0) * G + g;
        const float p = scores[n * L + l];
        for (int c = 0; c < C; c++) acc[n][c] += p * v[c];
      }
    }
  }
  for (int n = 0; n < NH; n++)
    for (int c = 0; c < C; c++) store16(j->out, bf16, q_at + (size_t)n * D + c * 16, acc[n][c] * inv_sum[n]);
}

static void run_task(const job_t *j, int task, float *scores) {
  const int b = task / j->tasks_per_seq, part = task % j->tasks_per_seq;
  const int h0 = part * j->heads_per_task;
  int h1 = h0 + j->heads_per_task;
  if (h1 > j->num_kv_heads) h1 = j->num_kv_heads;
  switch (j->head_dim) {
    case 64: attend(j, b, h0, h1, scores, 4); break;
    case 128: attend(j, b, h0, h1, scores, 8); break;
    default: attend(j, b, h0, h1, scores, j->head_dim / 16);
  }
}

static int worker(job_t *j) { /* 0, or 1 if its score buffer could not be had */
  const int G = j->num_heads / j->num_kv_heads;
  float *scores = malloc(sizeof(float) * j->heads_per_task * G * (size_t)j->max_blocks * j->block_size);
  if (scores == NULL) return 1;
  for (;;) {
    const int task = __atomic_fetch_add(&j->next_task, 1, __ATOMIC_RELAXED);
    if (task >= j->num_tasks) break;
    run_task(j, task, scores);
  }
  free(scores);
  return 0;
}

/* Returns 0, or -1 if memory for the scores could not be had. */
int paged_decode(int bf16, const void *q, const void *k_cache, const void *v_cache,
                 const int64_t *block_tables, const int64_t *context_lens, void *out, int num_seqs,
                 int num_heads, int num_kv_heads, int head_dim, int block_size, int max_blocks,
                 float scale, int num_threads) {
  job_t j = {bf16, q, k_cache, v_cache, block_tables, context_lens, out, num_heads, num_kv_heads,
             head_dim, block_size, max_blocks, scale, num_kv_heads, 1, num_seqs, 0};
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
  int failed = 0;
#pragma omp parallel num_threads(num_threads) reduction(| : failed)
  failed |= worker(&j);
  return failed ? -1 : 0;
}
