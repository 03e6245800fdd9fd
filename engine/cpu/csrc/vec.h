/* GCC vector helpers the paged attention kernels share: VW floats to a vector, loads and
 * stores of float32 or bfloat16 rows as float32 vectors, and reductions and exp over lanes. */
#ifndef CB_VEC_H
#define CB_VEC_H
#include <stdint.h>
#include <string.h>

#include "common.h"
#ifdef __AVX512BF16__ /* -march=native on a CPU with AVX512-BF16: vdpbf16ps */
#include <immintrin.h>
#define HAS_DPBF16 1
#else
#define HAS_DPBF16 0
#endif

/* VW floats to a vector: a zmm register with AVX-512, else a ymm (AVX2). A tile holds VW keys,
 * so its VW scores are one vector; wider vectors than the CPU's split into several registers,
 * and their cross-register shuffles and conversions compile to slow code. */
#ifdef __AVX512F__
#define VW 16
#else
#define VW 8
#endif
typedef float vf __attribute__((vector_size(VW * 4)));
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));
typedef uint16_t vh __attribute__((vector_size(VW * 2)));
typedef uint32_t vu __attribute__((vector_size(VW * 4)));
typedef int32_t vi __attribute__((vector_size(VW * 4)));

static inline vf load_vec(const void *base, int bf16, size_t i) {
  vf f;
  if (bf16) { /* a bfloat16 is the high half of a float32 */
    vh h;
    memcpy(&h, (const uint16_t *)base + i, sizeof h);
    vu u = __builtin_convertvector(h, vu) << 16;
    memcpy(&f, &u, sizeof f);
  } else {
    memcpy(&f, (const float *)base + i, sizeof f);
  }
  return f;
}

static inline void store_vec(void *base, int bf16, size_t i, vf x) {
  if (bf16) {
    for (int k = 0; k < VW; k++) ((uint16_t *)base)[i + k] = to_bf16(x[k]);
  } else {
    memcpy((float *)base + i, &x, sizeof x);
  }
}

static inline float sum_lanes(vf x) {
#if VW == 16
  v8 a = __builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7) +
         __builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15);
#else
  v8 a = x;
#endif
  v4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  return (b[0] + b[2]) + (b[1] + b[3]);
}

static inline vf select_lanes(vi mask, vf a, vf b) { /* a where mask is set, else b */
  return (vf)(((vi)a & mask) | ((vi)b & ~mask));
}

/* exp_approx (common.h) on VW lanes at once, for x <= 0 only (a softmax's score less its
 * running max), where it equals exp_approx bit for bit: the clamp above and the 2^128 case
 * never arise. Written with vector operations: GCC does not vectorize the scalar function's
 * clamps and bit casts over lanes on AVX2. */
static inline vf exp_lanes(vf x) {
  const vf lo = (vf){0} - 87.3f;
  x = select_lanes(x < lo, lo, x);
  const vf n = EXP_N(x);
  const vf p = EXP_POLY(x, n);
  return p * (vf)((__builtin_convertvector(n, vi) + 127) << 23);
}

static inline vf max_vec(vf a, vf b) { return select_lanes(a > b, a, b); }

static inline float max_lanes(vf x) {
  float m = x[0];
  for (int i = 1; i < VW; i++) m = x[i] > m ? x[i] : m;
  return m;
}

#endif
