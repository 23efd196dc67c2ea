/* gradc prelude: the fixed C text that every generated program starts with (copied into it,
 * so a generated file compiles on its own): includes, macros and numeric helpers.
 *
 * - gc_h2f / gc_f2h / gc_d2h: exact float16 conversions done with integer operations (no
 *   floating-point arithmetic, so FTZ/DAZ modes of the host process cannot change them).
 *   Rounding is to nearest even; a NaN keeps its sign and the top bits of its payload (a
 *   payload that would become 0 becomes 1, so it stays a NaN), exactly as NumPy's
 *   npy_floatbits_to_halfbits.
 * - gc_cvt32 / gc_cvt64 and the gc_f2* casts: float to integer. C leaves out-of-range values
 *   undefined; gradc defines them as NumPy behaves on x86-64: truncate toward zero, an invalid
 *   value (NaN, out of range) of a 32/64-bit conversion gives the most negative value, and
 *   narrower types wrap the 32-bit result (uint32/uint64 subtract 2^31/2^63 first when above).
 * - gc_wrap_*: integer narrowing by wrap-around without implementation-defined conversions.
 * - gc_axis_taps: resample's tap rule for one axis, the same float32 operations as
 *   gradc.ir.ops.resample.axis_taps (compiled with -ffp-contract=off: one rounding each).
 * - The transcendental functions (gc_exp, gc_log, gc_tanh, gc_erf, gc_sin, gc_cos, gc_gelu_*):
 *   transcend.h, which backends/c/prelude.py appends to this header.
 *
 * GC_BLK must equal STREAM_BLOCK in backends/c/kernel.py (tests/test_c_golden.py checks it).
 */
#ifndef GRADC_PRELUDE_H
#define GRADC_PRELUDE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__GNUC__) || defined(__clang__)
#define GC_INLINE static inline __attribute__((always_inline))
#define GC_NOINLINE __attribute__((noinline))
#else
#define GC_INLINE static inline
#define GC_NOINLINE
#endif
#define GC_PAR_MIN 32768

/* Per-thread scratch: cache-line aligned and padded, so threads never share a line. */
static inline void *gc_alloc(size_t n) { return aligned_alloc(64, (n + 127) & ~(size_t)63); }

/* Streaming (non-temporal) stores for kernels that move more data than stays in cache: a kernel
 * computes a block of GC_BLK elements into a local array and copies it out with stores that
 * skip the read-for-ownership of every written cache line (a third less traffic for
 * y = f(a, b)). Below GC_STREAM_MIN bytes moved (read + written) the output is left in cache
 * for the next kernel. x86-64 only (SSE2, 16-byte aligned destinations).
 *
 * A block that starts a cache line is copied with the widest streaming store the target has
 * (AVX-512: one 64-byte store per line; AVX: two of 32 bytes), straight from registers. The
 * copy used to be 16-byte stores only: sixteen per 256-byte block, four times the store
 * instructions of the vector code that computes the block, and a thread issuing them was
 * slower than one writing with plain vector stores (relu_grad [32,64,56,56] on the project's
 * AMD EPYC, one thread: 2.7-2.8 ms against 2.0-2.2 with plain stores and 1.7-1.9 with whole-line
 * streaming stores), so the streamed kernels had lost their lead over PyTorch's plain stores. */
#if defined(__SSE2__)
#include <emmintrin.h>
#define GC_SSE2 1
#define GC_STREAM 1
#else
#define GC_SSE2 0
#define GC_STREAM 0
#endif
#if GC_STREAM && (defined(__AVX512F__) || defined(__AVX__))
#include <immintrin.h>
#endif
#define GC_STREAM_MIN ((int64_t)16 << 20)  /* bytes moved by one kernel */
#define GC_BLK 64                         /* elements per streamed block */
GC_INLINE int gc_al16(const void *p) { return ((uintptr_t)p & 15u) == 0; }
#if GC_STREAM && defined(__AVX512F__)
#define GC_WIDE 64
#define GC_STREAM_WIDE(d, s) \
  _mm512_stream_si512((__m512i *)(d), _mm512_loadu_si512((const void *)(s)))
#elif GC_STREAM && defined(__AVX__)
#define GC_WIDE 32
#define GC_STREAM_WIDE(d, s) \
  _mm256_stream_si256((__m256i *)(d), _mm256_loadu_si256((const __m256i *)(s)))
#else
#define GC_WIDE 16
#define GC_STREAM_WIDE(d, s) \
  _mm_stream_si128((__m128i *)(d), _mm_loadu_si128((const __m128i *)(s)))
#endif
GC_INLINE void gc_stream(void *restrict dst, const void *restrict src, size_t bytes) {
#if GC_STREAM
  /* bytes is a multiple of 16 and dst 16-byte aligned. Both loops have a trip count the
   * compiler knows (bytes is a constant at every call), so the staged block stays in
   * registers: a block copied through the stack costs as many stores again, and ran
   * relu_grad a third slower. */
  char *d = (char *)dst;
  const char *s = (const char *)src;
  if (((uintptr_t)d & (GC_WIDE - 1)) == 0 && (bytes & (GC_WIDE - 1)) == 0) {
    for (size_t k = 0; k < bytes; k += GC_WIDE)  /* whole lines (or halves): the usual case */
      GC_STREAM_WIDE(d + k, s + k);
  } else {
    for (size_t k = 0; k < bytes; k += 16)
      _mm_stream_si128((__m128i *)(d + k), _mm_loadu_si128((const __m128i *)(s + k)));
  }
#else
  memcpy(dst, src, bytes);
#endif
}
GC_INLINE void gc_stream_fence(void) {  /* before the stores are read by another thread */
#if GC_STREAM
  _mm_sfence();
#endif
}
#if GC_SSE2
/* Four floats: streamed to a 16-byte aligned address (st != 0) or stored through the cache. */
GC_INLINE void gc_put4(float *p, __m128 v, int st) {
  if (st) _mm_stream_ps(p, v); else _mm_storeu_ps(p, v);
}
GC_INLINE __m128 gc_sel4(__m128 m, __m128 a, __m128 b) {  /* m ? a : b, lane-wise */
  return _mm_or_ps(_mm_and_ps(m, a), _mm_andnot_ps(m, b));
}
#endif

GC_INLINE float gc_bits2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
GC_INLINE uint32_t gc_f2bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
GC_INLINE uint64_t gc_d2bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }

GC_INLINE uint32_t gc_h2fbits(uint16_t h) {  /* the float32 bit pattern of a float16 */
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return sign | 0x7f800000u | (m << 13);
    if (e != 0) return sign | ((e + 112u) << 23) | (m << 13);
    if (m == 0) return sign;
    uint32_t shift = 0;
    while (!(m & 0x400u)) { m <<= 1; shift++; }
    return sign | ((113u - shift) << 23) | ((m & 0x3ffu) << 13);
}
GC_INLINE float gc_h2f(uint16_t h) { return gc_bits2f(gc_h2fbits(h)); }
GC_INLINE double gc_h2d(uint16_t h) {  /* bit moves only: signaling NaNs stay signaling */
    const uint32_t f = gc_h2fbits(h);
    const uint64_t sign = (uint64_t)(f >> 31) << 63, e = (f >> 23) & 0xffu, m = f & 0x7fffffu;
    uint64_t bits;
    if (e == 0xffu) bits = sign | UINT64_C(0x7ff0000000000000) | (m << 29);
    else if (e == 0) bits = sign;  /* zero: float16 subnormals are float32 normals */
    else bits = sign | ((e + 896u) << 52) | (m << 29);
    double d; memcpy(&d, &bits, 8); return d;
}

GC_INLINE uint16_t gc_f2h(float f) {
    uint32_t x = gc_f2bits(f);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) {
        if (ax == 0x7f800000u) return (uint16_t)(sign | 0x7c00u);
        uint32_t m = ax >> 13 & 0x3ffu;
        return (uint16_t)(sign | 0x7c00u | (m ? m : 1u));
    }
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (ax >= 0x38800000u) {
        uint32_t r = ax - (112u << 23);
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (ax <= 0x33000000u) return (uint16_t)sign;
    uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126u - e;
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

GC_INLINE uint16_t gc_d2h(double d) {
    uint64_t x = gc_d2bits(d);
    uint32_t sign = (uint32_t)(x >> 48) & 0x8000u;
    uint64_t ax = x & UINT64_C(0x7fffffffffffffff);
    if (ax >= UINT64_C(0x7ff0000000000000)) {
        if (ax == UINT64_C(0x7ff0000000000000)) return (uint16_t)(sign | 0x7c00u);
        uint32_t m = (uint32_t)(ax >> 42) & 0x3ffu;
        return (uint16_t)(sign | 0x7c00u | (m ? m : 1u));
    }
    if (ax >= UINT64_C(0x40effe0000000000)) return (uint16_t)(sign | 0x7c00u);
    if (ax >= UINT64_C(0x3f10000000000000)) {
        uint64_t r = ax - (UINT64_C(1008) << 52);
        r += UINT64_C(0x1ffffffffff) + ((r >> 42) & 1u);
        return (uint16_t)(sign | (uint32_t)(r >> 42));
    }
    if (ax <= UINT64_C(0x3e60000000000000)) return (uint16_t)sign;
    uint64_t e = ax >> 52, m = (ax & UINT64_C(0xfffffffffffff)) | (UINT64_C(1) << 52);
    uint64_t shift = 1051u - e;
    uint64_t q = m >> shift, rem = m & ((UINT64_C(1) << shift) - 1u);
    uint64_t half = UINT64_C(1) << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | (uint32_t)q);
}

GC_INLINE int gc_finite_f(float v) { return (gc_f2bits(v) & 0x7f800000u) != 0x7f800000u; }
GC_INLINE int gc_finite_d(double v) {
    return (gc_d2bits(v) & UINT64_C(0x7ff0000000000000)) != UINT64_C(0x7ff0000000000000);
}

GC_INLINE int8_t gc_wrap_i8(uint64_t u) {
    uint32_t v = (uint32_t)(u & 0xffu);
    return v >= 0x80u ? (int8_t)((int32_t)v - 256) : (int8_t)v;
}
GC_INLINE int16_t gc_wrap_i16(uint64_t u) {
    uint32_t v = (uint32_t)(u & 0xffffu);
    return v >= 0x8000u ? (int16_t)((int32_t)v - 65536) : (int16_t)v;
}
GC_INLINE int32_t gc_wrap_i32(uint64_t u) {
    uint32_t v = (uint32_t)u;
    return v >= 0x80000000u ? (int32_t)(-(int32_t)(~v) - 1) : (int32_t)v;
}
GC_INLINE int64_t gc_wrap_i64(uint64_t u) {
    return u >= (UINT64_C(1) << 63) ? -(int64_t)(~u) - 1 : (int64_t)u;
}

GC_INLINE int32_t gc_cvt32(double d) {
    return (d > -2147483649.0 && d < 2147483648.0) ? (int32_t)d : INT32_MIN;
}
GC_INLINE int64_t gc_cvt64(double d) {
    return (d >= -9223372036854775808.0 && d < 9223372036854775808.0) ? (int64_t)d : INT64_MIN;
}
GC_INLINE uint32_t gc_f2u32(double d) {
    return d >= 2147483648.0 ? ((uint32_t)gc_cvt32(d - 2147483648.0) ^ 0x80000000u)
                             : (uint32_t)gc_cvt32(d);
}
GC_INLINE uint64_t gc_f2u64(double d) {
    return d >= 9223372036854775808.0
        ? ((uint64_t)gc_cvt64(d - 9223372036854775808.0) ^ (UINT64_C(1) << 63))
        : (uint64_t)gc_cvt64(d);
}

/* Resample's tap rule for one axis: taps of coordinates 0..nc-1 over an axis of size n.
   The float32 clamp to f32(n - 1) rounds up to n for some n above 2**24, so indices are
   clamped once more as integers (as resample.coord_taps does): none reaches past the axis. */
static inline void gc_axis_taps(int64_t nc, int64_t n, float scale, float ipo, float opo,
                                int linear, int increasing, int64_t *i0, int64_t *i1, float *w0,
                                float *w1) {
    const float hi = (float)(n - 1);
    for (int64_t o = 0; o < nc; o++) {
        float t = (float)o - opo;
        t = t / scale;
        const float x = t - ipo;
        if (!linear) {
            float r = increasing ? ceilf(x) : floorf(x);
            r = r < 0.0f ? 0.0f : (r > hi ? hi : r);
            i0[o] = i1[o] = (int64_t)r < n - 1 ? (int64_t)r : n - 1;
            w0[o] = 1.0f;
            w1[o] = 0.0f;
        } else {
            float xc = x > 0.0f ? x : 0.0f;
            xc = xc < hi ? xc : hi;
            const float fl = floorf(xc);
            const float f = xc - fl;
            i0[o] = (int64_t)fl < n - 1 ? (int64_t)fl : n - 1;
            i1[o] = i0[o] + 1 < n ? i0[o] + 1 : n - 1;
            w0[o] = 1.0f - f;
            w1[o] = f;
        }
    }
}

/* Matrix multiply for the convolution kernels (backends/c/conv_gemm.py): the BLIS loop nest
 * around a register-blocked micro-kernel, in the reference's summation order.
 *
 *   C[m, n] = C0[m, n] + sum over k ascending of A[m, k] * B[k, n]
 *
 * where C0 is +0 (zero_c) or C's value on entry; each product and each addition is rounded
 * separately (-ffp-contract=off: no FMA), so every element is the sequential sum the reference
 * computes. Both operands are read where they lie, through tables of offsets:
 * A[m, k] = A[amo[m] + aoff[k]] and B[k, n] = B[boff[k] + bno[n]] (amo or bno NULL: m or n)
 * -- a filter in any layout a convolution reads it, an input with zero borders read at each
 * tap's shift (implicit im2col), a cotangent across images. B is packed per block, unless bpk
 * says it is packed already: panel-major, B[((n / NR) * K + k) * NR + n % NR], zero past N,
 * 64-byte aligned (boff and bno are then not read). C is row-major, row stride ldc.
 *
 * When at least GC_PACK_MIN panels of NR columns read A, it is first packed once for all of
 * them (shared, in parallel): GC_MR-row strips, k-major, so a tile's k-step reads GC_MR
 * consecutive elements; with fewer panels (or if that buffer cannot be allocated) A is read in
 * place through its tables in tiles of GC_MRD rows, or of GC_MR consecutive rows (amo NULL:
 * one pointer per k-step, where a table takes a register per row; 16 rows through a table ran
 * the MLP's 8x3072 by 3072x128 product 1.3-1.7x slower).
 * A job is (chunk of GC_MC rows, group of panels): with packed A, up to GC_NCP panels,
 * grouped to balance the threads; with A in place, every panel when A is 4x B or more (each
 * row of A read once), else one. The jobs are shared by an orphaned `omp for` among the
 * threads of the enclosing parallel region (serially outside one, or in gc_gemm1_*), with the
 * barrier at its end. Per job, k runs in blocks of GC_KC (the chunk's
 * block of packed A stays in L2 over the group), and per block and panel the block of B is
 * packed into an aligned KC x NR panel with zeros past N (L1); each tile of the chunk (GC_MR
 * or GC_MRD rows x NR) stays in vector registers over the block (rows past M repeat the last
 * row and are dropped). Measured on AMD Zen 4 (AVX-512, 2 cores) at 1024^3: 16-row tiles of
 * packed A run at 180-190 GFLOP/s, 8-row tiles of A in place at 150-160, 8 x 2 or 6 x 2
 * vectors at 130. Without AVX-512's 32 vector registers the packed tile is 8 rows too. */
GC_INLINE int gc_threads(void) {  /* threads of the enclosing parallel region */
#ifdef _OPENMP
  return omp_get_num_threads();
#else
  return 1;
#endif
}
GC_INLINE int gc_thread(void) {  /* this thread's number in the enclosing parallel region */
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}
#if defined(__AVX512F__)
#define GC_MR 16
#else
#define GC_MR 8
#endif
#define GC_MRD 8
#ifndef GC_MC
#define GC_MC 256
#endif
#ifndef GC_KC
#define GC_KC 256
#endif
#ifndef GC_DIRECT_M
#define GC_DIRECT_M 64
#endif
#ifndef GC_PACK_MIN
#define GC_PACK_MIN 8
#endif
#ifndef GC_NCP
#define GC_NCP 64
#endif
/* Rows per job of a gemm that reads A in place, in jobs of ng panel groups per chunk of rows:
 * the chunk (whole tiles of mr rows, at most GC_MC) whose static schedule gives the busiest of
 * nth threads the fewest rows, the largest of those. Halving GC_MC until there were two jobs
 * per thread split a filter gradient's 144, 288 or 576 rows into 5 jobs, 3 on one thread and
 * 2 on the other: that thread did 2/3 of the work. */
static inline __attribute__((unused)) int64_t gc_row_chunk(int64_t M, int64_t mr, int64_t ng,
                                                           int64_t nth) {
  const int64_t tiles = (M + mr - 1) / mr, n0 = (M + GC_MC - 1) / GC_MC;
  int64_t best = GC_MC, load = INT64_MAX;
  for (int64_t nmc = n0; nmc <= tiles && nmc <= n0 + 8 * nth; nmc++) {
    const int64_t mcs = (tiles + nmc - 1) / nmc * mr, jobs = ng * ((M + mcs - 1) / mcs);
    const int64_t busiest = (jobs + nth - 1) / nth * mcs;
    if (busiest < load) { load = busiest; best = mcs; }
  }
  return best;
}
#define GC_UNROLL _Pragma("GCC unroll 16")
#define GC_AMO(m) (amo ? amo[m] : (m))  /* row m's offset in A */
/* One MRX x NR tile over a k-block: acc[r] += B row kk * A(r, kk) for kk ascending, where ADV
 * prepares step kk and AEL reads row r's element of it (inside GC_DEFINE_GEMM's tile loop: it
 * reads that loop's fresh, src, ld, bp, kb, full, c and tile). */
#define GC_TILE(T, V, MRX, ADV, AEL) GC_TILE_B(T, V, MRX, const V b = *(const V *)(bp + kk * NR);, \
                                               ADV, AEL)
/* The same, where BLD defines step kk's row of B (``V b``). */
#define GC_TILE_B(T, V, MRX, BLD, ADV, AEL) {                                                  \
    V acc[MRX];                                                                                \
    GC_UNROLL for (int r = 0; r < MRX; r++) {                                                  \
      if (fresh) acc[r] = (V){0}; else memcpy(&acc[r], src + r * ld, sizeof(V)); }            \
    for (int64_t kk = 0; kk < kb; kk++) {                                                      \
      BLD                                                                                      \
      ADV                                                                                      \
      GC_UNROLL for (int r = 0; r < MRX; r++) { const V p = b * (AEL); acc[r] = acc[r] + p; }  \
    }                                                                                          \
    T *dst = full ? c : tile;                                                                  \
    GC_UNROLL for (int r = 0; r < MRX; r++) memcpy(dst + r * ld, &acc[r], sizeof(V)); }
#define GC_DEFINE_GEMM(T, NAME, V, LANES, SER)                                                  \
static inline __attribute__((unused)) void NAME(                                               \
    int64_t M, int64_t N, int64_t K, const T *restrict A, const int64_t *restrict amo,         \
    const int64_t *restrict aoff, const T *restrict B, const int64_t *restrict boff,           \
    const int64_t *restrict bno, T *restrict C, int64_t ldc, int zero_c, int bpk) {            \
  enum { NR = LANES };                                                                         \
  const int64_t NP = (N + NR - 1) / NR;                                                        \
  T *ap = NULL;                                                                                \
  if (NP >= GC_PACK_MIN) {                                                                     \
    GC_OMP_SINGLE_CP_##SER                                                                     \
    ap = (T *)gc_alloc((size_t)((M + GC_MR - 1) / GC_MR * GC_MR) * (size_t)K * sizeof(T));     \
    if (ap) {                                                                                  \
      GC_OMP_FOR_##SER                                                                         \
      for (int64_t sp = 0; sp < (M + GC_MR - 1) / GC_MR; sp++) {                               \
        int64_t ro[GC_MR];                                                                     \
        for (int64_t r = 0; r < GC_MR; r++)                                                    \
          ro[r] = GC_AMO(sp * GC_MR + r < M ? sp * GC_MR + r : M - 1);                         \
        T *d = ap + sp * K * GC_MR;                                                            \
        for (int64_t kk = 0; kk < K; kk++) {                                                   \
          const T *s = A + aoff[kk];                                                           \
          GC_UNROLL for (int r = 0; r < GC_MR; r++) d[kk * GC_MR + r] = s[ro[r]];              \
        }                                                                                      \
      }                                                                                        \
    }                                                                                          \
  }                                                                                            \
  /* tiles of GC_MRD rows where A is read through a table of rows (a register per row) */     \
  const int64_t mr = ap || !amo ? GC_MR : GC_MRD;                                              \
  /* A read in place and 4x the size of B (a filter against few columns): each job takes all   \
   * the panels, so each row of A is read once, while it is in L2. */                         \
  const int all = !ap && M >= 4 * N;                                                           \
  /* rows per job: with A in place, balanced over the threads (gc_row_chunk); with packed A,  \
   * smaller chunks only when there are too few jobs for the threads */                       \
  int64_t mcs = ap ? GC_MC : gc_row_chunk(M, mr, all ? 1 : NP, GC_NTH_##SER);                  \
  while (ap && mcs > mr && NP * ((M + mcs - 1) / mcs) < 2 * (int64_t)GC_NTH_##SER)             \
    mcs = (mcs / 2 + mr - 1) / mr * mr;                                                        \
  const int64_t NMC = (M + mcs - 1) / mcs;                                                     \
  /* Groups of panels per row chunk (packed A): as few as give the busiest thread the fewest   \
   * panels, its share of the static schedule's jobs times the panels per job. */              \
  int64_t GP = all ? NP : 1;                                                                   \
  if (ap) {                                                                                    \
    const int64_t nth = GC_NTH_##SER;                                                          \
    int64_t load = INT64_MAX, ng0 = (NP + GC_NCP - 1) / GC_NCP;                                \
    while (ng0 < NP && ng0 * NMC < 2 * nth) ng0++; /* two jobs per thread at least */          \
    for (int64_t ng = ng0; ng <= NP && ng <= ng0 + 4 * nth; ng++) {                            \
      const int64_t gp = (NP + ng - 1) / ng, jobs = (NP + gp - 1) / gp * NMC;                  \
      if ((jobs + nth - 1) / nth * gp < load) { load = (jobs + nth - 1) / nth * gp; GP = gp; }\
    }                                                                                          \
  }                                                                                            \
  const int64_t J = (NP + GP - 1) / GP * NMC;                                                  \
  GC_OMP_FOR_##SER                                                                             \
  for (int64_t job = 0; job < J; job++) {                                                      \
    const int64_t g0 = job / NMC * GP, m0 = job % NMC * mcs;                                   \
    const int64_t g1 = NP - g0 < GP ? NP : g0 + GP, mb = M - m0 < mcs ? M - m0 : mcs;          \
    _Alignas(64) T bpbuf[GC_KC * NR];                                                          \
    _Alignas(64) T tile[GC_MR * NR];                                                           \
    for (int64_t k0 = 0; k0 < K; k0 += GC_KC)                                                  \
    for (int64_t g = g0; g < g1; g++) {                                                        \
      const int64_t kb = K - k0 < GC_KC ? K - k0 : GC_KC;                                      \
      const int64_t n0 = g * NR, nb = N - n0 < NR ? N - n0 : NR;                               \
      const T *bp = bpk ? B + (g * K + k0) * NR : bpbuf;                                       \
      /* few rows of packed A against a full panel of consecutive columns: B is read in place  \
       * (each row of a panel is one unaligned vector), packing it would cost more than the   \
       * GC_DIRECT_M / GC_MR tiles that read it */                                            \
      const int direct = ap && !bpk && !bno && nb == NR && M <= GC_DIRECT_M;                   \
      for (int64_t kk = 0; kk < kb && !bpk && !direct; kk++) {                                 \
        const T *s = B + boff[k0 + kk];                                                        \
        T *d = bpbuf + kk * NR;                                                                \
        if (!bno) for (int64_t j = 0; j < nb; j++) d[j] = s[n0 + j];                           \
        else for (int64_t j = 0; j < nb; j++) d[j] = s[bno[n0 + j]];                           \
        for (int64_t j = nb; j < NR; j++) d[j] = 0;                                            \
      }                                                                                        \
      const int fresh = zero_c && k0 == 0;                                                     \
      for (int64_t i = 0; i < mb; i += mr) {                                                   \
        const int64_t rows = mb - i < mr ? mb - i : mr;                                        \
        const int full = rows == mr && nb == NR;                                               \
        T *c = C + (m0 + i) * ldc + n0;                                                        \
        const T *src = full ? c : tile;                                                        \
        const int64_t ld = full ? ldc : NR;                                                    \
        if (!full) {                                                                           \
          memset(tile, 0, sizeof tile);                                                        \
          if (!fresh)                                                                          \
            for (int64_t r = 0; r < rows; r++)                                                 \
              for (int64_t j = 0; j < nb; j++) tile[r * NR + j] = c[r * ldc + j];              \
        }                                                                                      \
        if (ap && direct) {                                                                    \
          const T *a = ap + ((m0 + i) * K + k0 * GC_MR), *bd = B + n0;                         \
          const int64_t *bo = boff + k0;                                                       \
          GC_TILE_B(T, V, GC_MR, V b; memcpy(&b, bd + bo[kk], sizeof b);,                      \
                    const T *ak = a + kk * GC_MR;, ak[r])                                      \
        } else if (ap) {                                                                       \
          const T *a = ap + ((m0 + i) * K + k0 * GC_MR);                                       \
          GC_TILE(T, V, GC_MR, const T *ak = a + kk * GC_MR;, ak[r])                           \
        } else if (!amo && rows == GC_MR) { /* consecutive rows: one pointer */                 \
          const T *a0 = A + m0 + i;                                                            \
          const int64_t *ko = aoff + k0;                                                       \
          GC_TILE(T, V, GC_MR, const T *ak = a0 + ko[kk];, ak[r])                              \
        } else {                                                                               \
          const T *ar[GC_MR];                                                                  \
          GC_UNROLL for (int r = 0; r < GC_MR; r++)                                            \
            ar[r] = A + GC_AMO(m0 + i + (r < rows ? r : rows - 1));                            \
          const int64_t *ko = aoff + k0;                                                       \
          if (mr == GC_MRD) GC_TILE(T, V, GC_MRD, const int64_t o = ko[kk];, ar[r][o])         \
          else GC_TILE(T, V, GC_MR, const int64_t o = ko[kk];, ar[r][o])                       \
        }                                                                                      \
        if (!full)                                                                             \
          for (int64_t r = 0; r < rows; r++)                                                   \
            for (int64_t j = 0; j < nb; j++) c[r * ldc + j] = tile[r * NR + j];              \
      }                                                                                        \
    }                                                                                          \
  }                                                                                            \
  if (ap) {                                                                                    \
    GC_OMP_SINGLE_NW_##SER                                                                     \
    free(ap);                                                                                  \
  }                                                                                            \
}
typedef float gc_vf32 __attribute__((vector_size(64)));
typedef double gc_vf64 __attribute__((vector_size(64)));
typedef int32_t gc_vi32 __attribute__((vector_size(64)));  /* masks and indices of gc_vf32 lanes */
/* half-width vectors, for products of at most 8 (float) or 4 (double) columns: a full vector
 * would compute as many lanes again and drop them (conv_classes.py: one column per image) */
typedef float gc_vh32 __attribute__((vector_size(32)));
typedef double gc_vh64 __attribute__((vector_size(32)));
/* The shared gemm (SER 0: jobs of an orphaned `omp for`) and the serial one (SER 1: one thread
 * runs every job, as inside a parallel loop's iteration, where worksharing cannot nest). */
#define GC_OMP_SINGLE_CP_0 _Pragma("omp single copyprivate(ap)")
#define GC_OMP_FOR_0 _Pragma("omp for schedule(static)")
#define GC_OMP_SINGLE_NW_0 _Pragma("omp single nowait")
#define GC_NTH_0 gc_threads()
#define GC_OMP_SINGLE_CP_1
#define GC_OMP_FOR_1
#define GC_OMP_SINGLE_NW_1
#define GC_NTH_1 1
GC_DEFINE_GEMM(float, gc_gemm_f32, gc_vf32, 16, 0)
GC_DEFINE_GEMM(double, gc_gemm_f64, gc_vf64, 8, 0)
GC_DEFINE_GEMM(float, gc_gemm1_f32, gc_vf32, 16, 1)
GC_DEFINE_GEMM(double, gc_gemm1_f64, gc_vf64, 8, 1)
GC_DEFINE_GEMM(float, gc_gemmh_f32, gc_vh32, 8, 0)
GC_DEFINE_GEMM(double, gc_gemmh_f64, gc_vh64, 4, 0)
GC_DEFINE_GEMM(float, gc_gemmh1_f32, gc_vh32, 8, 1)
GC_DEFINE_GEMM(double, gc_gemmh1_f64, gc_vh64, 4, 1)

#endif  /* GRADC_PRELUDE_H */
