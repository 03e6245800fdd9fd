/* Paged attention for prefill chunks on a CPU: every query token of a chunk attends, causally,
 * over its sequence's blocks of the KV pool (the keys computed before the chunk and the
 * chunk's own, which the step has written there), read in place.
 *
 * Shapes (row-major):
 *   q             (T, H, D)            the step's packed queries, rows q_stride elements apart
 *                                      (a view of packed qkv); heads h*G .. h*G+G-1 share KV head h
 *   out           (T, H, D)            contiguous; only the chunks' rows are written
 *   k_cache, v_cache (NB, BS, Hkv, D)  the pool of one layer: a block is one contiguous row
 *   block_tables  (C, nb) int64        each chunk's sequence's blocks, in order (padding unread)
 *   chunks        (C, 3) int64         per chunk: its first query's row of q, its number of
 *                                      queries n, and its context length L: its query i
 *                                      (0 .. n-1) attends to keys 0 .. L - n + i
 * float32 or bfloat16 throughout; scores, softmax and sums in float32; D a multiple of 16.
 *
 * A task is one KV head of a tile of query tokens, whose G query heads each make R rows (48 or
 * a few more) that share every key. Its queries are transposed once, so that a key's scores
 * for VW rows are one vector: multiply-adds of a query vector by the key's element, as in a
 * matrix product, with no transposed copy of the keys. The online softmax (running max and
 * sum per row, over tiles of KEY_TILE keys) then works on whole vectors of rows, and
 * out += weights . v takes a few rows at a time, their accumulators in registers. With
 * AVX512-BF16, bfloat16 scores and weighted sums multiply pairs of bfloat16 (vdpbf16ps), the
 * weights rounded to bfloat16 as SDPA's bfloat16 kernels round them. Tasks come from a shared counter, the
 * longest (the last tile of a chunk) first, on torch's OpenMP team, as in paged_decode.c.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "vec.h"

#define TASK_ROWS 48 /* query rows of a task: G times its tokens, about */
#define KEY_TILE 16  /* keys of one online softmax step */
#if VW == 16
#define ROW_VECS 3 /* scores: rows x keys computed together, their accumulators in registers */
#define KEYS 8
#define VALUE_REGS 24 /* weighted sums: accumulator registers (rows x D / VW) */
#else
#define ROW_VECS 2
#define KEYS 4
#define VALUE_REGS 12
#endif
#define ROW_BLOCK (ROW_VECS * VW) /* a task's rows are padded to a multiple of this */
#define ROWS_IN(C) (VALUE_REGS / (C) > 0 ? VALUE_REGS / (C) : 1)

typedef struct {
  int bf16, pairs; /* pairs: bfloat16 by vdpbf16ps */
  const void *q, *k_cache, *v_cache;
  const int64_t *block_tables, *chunks;
  void *out;
  int64_t q_stride;
  int num_heads, num_kv_heads, head_dim, block_size, max_blocks;
  float scale;
  int tile_tokens, max_rows;
  int num_tasks;
  const int *first_task; /* (C + 1,) each chunk's first task */
  int next_task;         /* the shared counter */
} job_t;

typedef struct { /* one thread's scratch, sized for the largest task */
  float *qt;     /* (D, R) the queries transposed, times scale; pairs: (D/2, R) bfloat16 pairs */
  float *s;      /* (KEY_TILE, R) a key tile's scores, then weights; pairs: weight pairs after */
  float *k, *v;  /* (KEY_TILE, D) a bfloat16 tile's keys and values widened; pairs: v as key
                  * pairs (a float32 pool is read in place) */
  float *acc;    /* (R, D) out, unnormalized */
  float *max, *sum;
  int32_t *last; /* (R,) each row's last key */
  uint16_t *zeros; /* (D,) the rows of keys past the chunk's last */
} scratch_t;

static inline vf load_at(const float *p) { vf x; memcpy(&x, p, sizeof x); return x; }
static inline void store_at(float *p, vf x) { memcpy(p, &x, sizeof x); }

/* Scores of keys j0 .. j0 + KEYS - 1 for rows r0 .. r0 + ROW_BLOCK - 1. */
static inline __attribute__((always_inline)) void scores(scratch_t *s, const void *const *rows,
                                                        int pairs, int j0, int r0, int R,
                                                        const int D) {
  vf a[KEYS][ROW_VECS];
  for (int k = 0; k < KEYS; k++)
    for (int v = 0; v < ROW_VECS; v++) a[k][v] = (vf){0};
#if HAS_DPBF16
  if (pairs) {
    for (int p = 0; p < D / 2; p++) {
      __m512bh q[ROW_VECS];
      for (int v = 0; v < ROW_VECS; v++)
        q[v] = (__m512bh)_mm512_loadu_si512(s->qt + (size_t)p * R + r0 + v * VW);
      for (int k = 0; k < KEYS; k++) {
        const __m512bh key = (__m512bh)_mm512_set1_epi32(((const int32_t *)rows[j0 + k])[p]);
        for (int v = 0; v < ROW_VECS; v++) a[k][v] = (vf)_mm512_dpbf16_ps((__m512)a[k][v], q[v], key);
      }
    }
  } else
#endif
  {
    (void)pairs;
    for (int d = 0; d < D; d++) {
      vf q[ROW_VECS];
      for (int v = 0; v < ROW_VECS; v++) q[v] = load_at(s->qt + (size_t)d * R + r0 + v * VW);
      for (int k = 0; k < KEYS; k++) {
        const float key = ((const float *)rows[j0 + k])[d];
        for (int v = 0; v < ROW_VECS; v++) a[k][v] += key * q[v];
      }
    }
  }
  for (int k = 0; k < KEYS; k++)
    for (int v = 0; v < ROW_VECS; v++) store_at(s->s + (size_t)(j0 + k) * R + r0 + v * VW, a[k][v]);
}

/* The online softmax step of a key tile for rows r0 .. r0 + VW - 1: the scores in s become
 * weights (zero for a key after a row's last, or past the tile's `keys`); their rows of acc
 * are rescaled where the running max grew. */
static inline __attribute__((always_inline)) void softmax_step(scratch_t *s, int r0, int R,
                                                              int64_t k0, int keys, int masked,
                                                              float scale, const int D) {
  vi last, lane_ok = (vi){0} - 1;
  if (masked) {
    vi at;
    memcpy(&at, s->last + r0, sizeof at);
    last = at - (int32_t)k0;
  }
  const vf old = load_at(s->max + r0);
  vf m = old;
  for (int j = 0; j < KEY_TILE; j++) {
    float *row = s->s + (size_t)j * R + r0;
    vf x = load_at(row) * scale;
    if (masked) {
      lane_ok = (last >= j) & ((vi){0} + (j < keys ? -1 : 0));
      x = select_lanes(lane_ok, x, (vf){0} - INFINITY);
    }
    store_at(row, x);
    m = max_vec(m, x);
  }
  const vf alpha = exp_lanes(old - m); /* 0 for a row's first tile (old = -inf) */
  store_at(s->max + r0, m);
  vf sum = load_at(s->sum + r0) * alpha;
  for (int j = 0; j < KEY_TILE; j++) {
    float *row = s->s + (size_t)j * R + r0;
    vf w = exp_lanes(load_at(row) - m);
    if (masked) {
      lane_ok = (vi)(load_at(row) > (vf){0} - INFINITY);
      w = select_lanes(lane_ok, w, (vf){0});
    }
    store_at(row, w);
    sum += w;
  }
  store_at(s->sum + r0, sum);
  const vi grew = alpha != (vf){0} + 1.f;
  uint64_t words[VW / 2], any = 0;
  memcpy(words, &grew, sizeof words);
  for (int i = 0; i < VW / 2; i++) any |= words[i];
  for (int l = 0; any && l < VW; l++) {
    if (!grew[l]) continue;
    float *acc = s->acc + (size_t)(r0 + l) * D;
    for (int c = 0; c < D / VW; c++) store_at(acc + c * VW, load_at(acc + c * VW) * alpha[l]);
  }
}

/* acc += weights . v for rows r0 .. r0 + RB - 1 over the tile's keys: weight pairs by value
 * pairs (s: (KEY_TILE / 2, R), v: (KEY_TILE / 2, D) as bfloat16 pairs), or float32 (s:
 * (KEY_TILE, R), v: (KEY_TILE, D)). With C = D / VW and RB constants (RB * C <= VALUE_REGS),
 * the accumulators stay in registers; else (any other head_dim) one vector at a time. */
static inline __attribute__((always_inline)) void add_values(scratch_t *s,
                                                            const void *const *rows, int pairs,
                                                            int r0, int R, int keys, const int C,
                                                            const int RB) {
  const int fits = RB * C <= VALUE_REGS;
  const int rb = fits ? RB : 1, cb = fits ? C : 1; /* a block of rb rows x cb vectors */
  for (int c0 = 0; c0 < C; c0 += cb) {
    vf acc[VALUE_REGS];
    for (int i = 0; i < rb; i++)
      for (int c = 0; c < cb; c++) acc[i * cb + c] = load_at(s->acc + (size_t)(r0 + i) * C * VW + (c0 + c) * VW);
#if HAS_DPBF16
    if (pairs) {
      for (int p = 0; p < (keys + 1) / 2; p++) {
        __m512bh v[VALUE_REGS];
        for (int c = 0; c < cb; c++)
          v[c] = (__m512bh)_mm512_loadu_si512(s->v + (size_t)p * C * VW + (c0 + c) * VW);
        for (int i = 0; i < rb; i++) {
          const __m512bh w = (__m512bh)_mm512_set1_epi32(((const int32_t *)s->s)[(size_t)p * R + r0 + i]);
          for (int c = 0; c < cb; c++) acc[i * cb + c] = (vf)_mm512_dpbf16_ps((__m512)acc[i * cb + c], w, v[c]);
        }
      }
    } else
#endif
    {
      (void)pairs;
      for (int k = 0; k < keys; k++) {
        vf v[VALUE_REGS];
        for (int c = 0; c < cb; c++) v[c] = load_at((const float *)rows[k] + (c0 + c) * VW);
        for (int i = 0; i < rb; i++) {
          const float w = s->s[(size_t)k * R + r0 + i];
          for (int c = 0; c < cb; c++) acc[i * cb + c] += w * v[c];
        }
      }
    }
    for (int i = 0; i < rb; i++)
      for (int c = 0; c < cb; c++) store_at(s->acc + (size_t)(r0 + i) * C * VW + (c0 + c) * VW, acc[i * cb + c]);
  }
}

static inline vu bf16_bits(vf x) { /* round to nearest even, as to_bf16 (weights: no NaN) */
  vu u;
  memcpy(&u, &x, sizeof u);
  return (u + 0x7fff + ((u >> 16) & 1)) >> 16;
}

/* KV head h of query tokens t0 .. t0 + nt - 1 of chunk ch. Row t * G + g is token t0 + t,
 * query head h * G + g; R rows, padded to ROW_BLOCK with rows of zeros (never stored). */
static inline __attribute__((always_inline)) void attend(const job_t *j, scratch_t *s, int ch,
                                                         int t0, int nt, int h, const int C,
                                                         const int RB) {
  const int G = j->num_heads / j->num_kv_heads, D = C * VW, BS = j->block_size;
  const int bf16 = j->bf16, pairs = j->pairs;
  const int64_t q_row = j->chunks[3 * ch], num_queries = j->chunks[3 * ch + 1];
  const int64_t past = j->chunks[3 * ch + 2] - num_queries; /* keys before the chunk */
  const int64_t *table = j->block_tables + (int64_t)ch * j->max_blocks;
  const size_t row_elems = (size_t)j->num_kv_heads * D;
  const int R = (nt * G + ROW_BLOCK - 1) / ROW_BLOCK * ROW_BLOCK;
  for (int r = 0; r < R; r++) {
    const int t = r / G, g = r % G;
    s->last[r] = t < nt ? (int32_t)(past + t0 + t) : INT32_MAX;
    s->max[r] = -INFINITY, s->sum[r] = 0.f;
    memset(s->acc + (size_t)r * D, 0, sizeof(float) * D);
    const size_t at = (size_t)(q_row + t0 + t) * j->q_stride + (size_t)(h * G + g) * D;
    if (pairs) {
      uint32_t *qt = (uint32_t *)s->qt;
      for (int p = 0; p < D / 2; p++) qt[(size_t)p * R + r] = t < nt ? ((const uint32_t *)j->q)[at / 2 + p] : 0;
    } else {
      for (int d = 0; d < D; d++)
        s->qt[(size_t)d * R + r] = t < nt ? (bf16 ? from_bf16(((const uint16_t *)j->q)[at + d]) : ((const float *)j->q)[at + d]) * j->scale : 0.f;
    }
  }
  const int64_t num_keys = past + t0 + nt; /* the last token's keys */
  for (int64_t k0 = 0; k0 < num_keys; k0 += KEY_TILE) {
    const int keys = num_keys - k0 < KEY_TILE ? (int)(num_keys - k0) : KEY_TILE;
    /* each key's row of K and of V, read in place (keys past the last read s->zeros); a
     * bfloat16 pool without vdpbf16ps is widened into s->k and s->v, which the rows then are */
    const void *krow[KEY_TILE], *vrow[KEY_TILE];
    int64_t blk = k0 / BS, off = k0 % BS; /* the block and row of key k0 + i, counted along */
    for (int i = 0; i < KEY_TILE; i++) {
      krow[i] = vrow[i] = s->zeros;
      if (i < keys) {
        const size_t at = ((size_t)table[blk] * BS + off) * row_elems + (size_t)h * D;
        krow[i] = (const char *)j->k_cache + at * (bf16 ? 2 : 4);
        vrow[i] = (const char *)j->v_cache + at * (bf16 ? 2 : 4);
        if (++off == BS) off = 0, blk++;
      }
      if (bf16 && !pairs) {
        for (int c = 0; c < C; c++) {
          store_at(s->k + (size_t)i * D + c * VW, load_vec(krow[i], 1, c * VW));
          store_at(s->v + (size_t)i * D + c * VW, load_vec(vrow[i], 1, c * VW));
        }
        krow[i] = s->k + (size_t)i * D, vrow[i] = s->v + (size_t)i * D;
      }
    }
    if (pairs) { /* v: key 2p and 2p + 1 of each element side by side */
      for (int p = 0; p < KEY_TILE / 2; p++)
        for (int c = 0; c < C; c++) {
          vh lo, hi;
          memcpy(&lo, (const uint16_t *)vrow[2 * p] + c * VW, sizeof lo);
          memcpy(&hi, (const uint16_t *)vrow[2 * p + 1] + c * VW, sizeof hi);
          const vu w = __builtin_convertvector(lo, vu) | __builtin_convertvector(hi, vu) << 16;
          memcpy(s->v + (size_t)p * D + c * VW, &w, sizeof w);
        }
    }
    for (int r0 = 0; r0 < R; r0 += ROW_BLOCK)
      for (int j0 = 0; j0 < KEY_TILE; j0 += KEYS) scores(s, krow, pairs, j0, r0, R, D);
    /* a tile with a key after some row's last (near the diagonal), or short of keys */
    const int masked = k0 + KEY_TILE - 1 > past + t0 || keys < KEY_TILE;
    for (int r0 = 0; r0 < R; r0 += VW) softmax_step(s, r0, R, k0, keys, masked, pairs ? j->scale : 1.f, D);
    if (pairs) { /* weights of keys 2p and 2p + 1 side by side, as bfloat16 */
      uint32_t *w = (uint32_t *)s->s;
      for (int p = 0; p < KEY_TILE / 2; p++)
        for (int r0 = 0; r0 < R; r0 += VW) {
          const vu pair = bf16_bits(load_at(s->s + (size_t)2 * p * R + r0)) |
                          bf16_bits(load_at(s->s + (size_t)(2 * p + 1) * R + r0)) << 16;
          memcpy(w + (size_t)p * R + r0, &pair, sizeof pair);
        }
    }
    int r0 = 0;
    for (; r0 + RB <= R; r0 += RB) add_values(s, vrow, pairs, r0, R, keys, C, RB);
    for (; r0 < R; r0++) add_values(s, vrow, pairs, r0, R, keys, C, 1);
  }
  const size_t out_row = (size_t)j->num_heads * D;
  for (int r = 0; r < nt * G; r++) {
    const int t = r / G, g = r % G;
    const size_t at = (size_t)(q_row + t0 + t) * out_row + (size_t)(h * G + g) * D;
    const vf inv = (vf){0} + 1.f / s->sum[r];
    for (int c = 0; c < C; c++) store_vec(j->out, bf16, at + c * VW, load_at(s->acc + (size_t)r * D + c * VW) * inv);
  }
}

static void run_task(const job_t *j, scratch_t *s, int task) {
  int ch = 0;
  while (task >= j->first_task[ch + 1]) ch++;
  const int local = task - j->first_task[ch];
  const int64_t num_queries = j->chunks[3 * ch + 1];
  const int num_tiles = (int)((num_queries + j->tile_tokens - 1) / j->tile_tokens);
  const int tile = num_tiles - 1 - local / j->num_kv_heads; /* the last (longest) first */
  const int h = local % j->num_kv_heads;
  const int t0 = tile * j->tile_tokens;
  const int nt = num_queries - t0 < j->tile_tokens ? (int)(num_queries - t0) : j->tile_tokens;
  switch (j->head_dim) { /* RB rows of weighted sums at a time, in VALUE_REGS registers */
    case 64: attend(j, s, ch, t0, nt, h, 64 / VW, ROWS_IN(64 / VW)); break;
    case 128: attend(j, s, ch, t0, nt, h, 128 / VW, ROWS_IN(128 / VW)); break;
    default: attend(j, s, ch, t0, nt, h, j->head_dim / VW, 1);
  }
}

static void worker(job_t *j) { /* a worker without scratch takes no task */
  const size_t R = j->max_rows, D = j->head_dim;
  const size_t floats = D * R + KEY_TILE * R + 2 * KEY_TILE * D + R * D + 2 * R + R + D;
  float *mem = aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64);
  if (mem == NULL) return;
  scratch_t s;
  s.qt = mem;
  s.s = s.qt + D * R;
  s.k = s.s + KEY_TILE * R;
  s.v = s.k + KEY_TILE * D;
  s.acc = s.v + KEY_TILE * D;
  s.max = s.acc + R * D;
  s.sum = s.max + R;
  s.last = (int32_t *)(s.sum + R);
  s.zeros = (uint16_t *)(s.sum + 2 * R);
  memset(s.zeros, 0, D * sizeof(float));
  for (;;) {
    const int task = __atomic_fetch_add(&j->next_task, 1, __ATOMIC_RELAXED);
    if (task >= j->num_tasks) break;
    run_task(j, &s, task);
  }
  free(mem);
}

/* Returns 0, or -1 if no thread could allocate its scratch memory (then nothing is written). */
int paged_prefill(int bf16, const void *q, int64_t q_stride, const void *k_cache,
                  const void *v_cache, const int64_t *block_tables, const int64_t *chunks,
                  void *out, int num_chunks, int num_heads, int num_kv_heads, int head_dim,
                  int block_size, int max_blocks, float scale, int num_threads) {
  const int G = num_heads / num_kv_heads;
  const int tile_tokens = TASK_ROWS / G > 0 ? TASK_ROWS / G : 1;
  int *first_task = malloc(sizeof(int) * (num_chunks + 1));
  if (first_task == NULL) return -1;
  first_task[0] = 0;
  for (int c = 0; c < num_chunks; c++) {
    const int64_t tiles = (chunks[3 * c + 1] + tile_tokens - 1) / tile_tokens;
    first_task[c + 1] = first_task[c] + (int)tiles * num_kv_heads;
  }
  job_t j = {0};
  j.bf16 = bf16, j.pairs = bf16 && HAS_DPBF16;
  j.q = q, j.k_cache = k_cache, j.v_cache = v_cache;
  j.block_tables = block_tables, j.chunks = chunks, j.out = out, j.q_stride = q_stride;
  j.num_heads = num_heads, j.num_kv_heads = num_kv_heads, j.head_dim = head_dim;
  j.block_size = block_size, j.max_blocks = max_blocks, j.scale = scale;
  j.tile_tokens = tile_tokens;
  j.max_rows = (tile_tokens * G + ROW_BLOCK - 1) / ROW_BLOCK * ROW_BLOCK;
  j.num_tasks = first_task[num_chunks], j.first_task = first_task;
  if (num_threads < 1) num_threads = 1;
  if (num_threads > j.num_tasks) num_threads = j.num_tasks > 0 ? j.num_tasks : 1;
#pragma omp parallel num_threads(num_threads)
  worker(&j);
  free(first_task);
  return j.next_task < j.num_tasks ? -1 : 0;
}
