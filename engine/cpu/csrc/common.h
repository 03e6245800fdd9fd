/* What the engine's C sources share: bfloat16 <-> float32 and exp(x), as scalar code that GCC
 * vectorizes, in a loop or over the lanes of a vector. */
#ifndef CB_COMMON_H
#define CB_COMMON_H
#include <stdint.h>
#include <string.h>

static inline __attribute__((always_inline)) float from_bf16(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16; /* a bfloat16 is the high half of a float32 */
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Round to nearest even, NaN stays NaN: as torch. */
static inline __attribute__((always_inline)) uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  const uint16_t rounded = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
  return f != f ? 0x7fc0 : rounded;
}

static inline __attribute__((always_inline)) float round_bf16(float f) {
  return from_bf16(to_bf16(f));
}

/* exp(x), Cephes' expf: x = n ln2 + r, a degree-7 polynomial in r, times 2^n (within 2 ulp of
 * expf). EXP_N and EXP_POLY take a float or a GCC vector of floats alike (the constants
 * broadcast), so the paged kernel's vector exp shares them. */
#define EXP_ROUND 12582912.f /* 1.5 * 2^23: adding it rounds to an integer */
#define EXP_N(x) (((x) * 1.44269504f + EXP_ROUND) - EXP_ROUND) /* -126 .. 128 once clamped */
#define EXP_POLY(x, n) /* the polynomial at r = x - n ln2 (ln2 in two parts) */                  \
  ({                                                                                           \
    __typeof__(x) r_ = (x) - (n) * 0.693359375f + (n) * 2.12194440e-4f;                        \
    __typeof__(x) p_ = r_ * 1.9875691500e-4f + 1.3981999507e-3f;                               \
    p_ = p_ * r_ + 8.3334519073e-3f;                                                           \
    p_ = p_ * r_ + 4.1665795894e-2f;                                                           \
    p_ = p_ * r_ + 1.6666665459e-1f;                                                           \
    p_ = p_ * r_ + 5.0000001201e-1f;                                                           \
    p_ * r_ * r_ + r_ + 1.f;                                                                   \
  })

/* Below -87.3 it gives ~1e-38 (expf's smallest normal); from 88.72 on, inf, as expf. */
static inline __attribute__((always_inline)) float exp_approx(float x) {
  x = x < -87.3f ? -87.3f : x > 89.f ? 89.f : x;
  const float n = EXP_N(x);
  const float p = EXP_POLY(x, n);
  const int32_t up = n > 0.f; /* 2^n as 2^(n - up) * 2^up: 2^128 is no float */
  const uint32_t bits = (uint32_t)((int32_t)n - up + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale * (up ? 2.f : 1.f);
}

/* How many panels a thread of a GEMM takes at a time: about an eighth of its share, so that a
 * thread that loses its core for a time slice (to the event loop, a client, a browser) leaves
 * the rest of its share to the others instead of holding them all at the barrier. */
static inline int64_t panel_chunk(int64_t panels, int num_threads) {
  const int64_t per_eighth = panels / (8 * (int64_t)num_threads);
  return per_eighth > 1 ? per_eighth : 1;
}

#endif
