/* gradc's product of packed blocks (backends/c/gemm.py): C = op(A) @ op(B), batched, with
 * sums over segments of k, in the reference's summation order.
 *
 *   C_b[m, n] = sum over k ascending of op(A)_b[m, k] * op(B)_b[k, n]         (kseg == 0)
 *   C[m, n]   = S_0 + S_1 + ... + S_{K/kseg - 1},                              (kseg > 0)
 *               S_s = sum over k of op(A)[m, s * kseg + k] * op(B)[s * kseg + k, n]
 *
 * Every sum starts from +0 and adds one rounded product per k, each addition rounded (the
 * program is compiled with -ffp-contract=off: no FMA), so every element is gemm's canonical
 * sum (k ascending from +0); the segmented form is reduce_sum's canonical sum of the
 * per-segment products, the first taken as it is (gemm's sum starting from +0 is never -0,
 * so adding it to reduce_sum's first accumulator changes nothing) -- a batched weight gradient
 * and its sum over the batch in one pass, without the batched intermediate.
 *
 * op(A)[m, k] = A[oa[b] + s * sas + m * sam + k * sak] for k = s * kseg + kk (s = 0 without
 * segments), op(B)[k, n] = B[ob[b] + s * sbs + k * sbk + n * sbn]; C_b starts at C + b * M * ldc
 * (row stride ldc). A job is (batch, chunk of GC_MM_MC rows, block of GC_MM_NC columns); per
 * block of k (GC_MM_KC steps, or one segment) the job packs its rows of op(A) into strips of
 * GC_MM_MR rows and its columns of op(B) into panels of GC_MM_NR columns (k-major, zero past
 * M and N), then runs each panel (in L1) against every strip (in L2): a tile of GC_MM_MR x
 * GC_MM_NR sums stays in registers over the block (8 x 2 vectors: on AMD Zen 5 every tile
 * shape from 8 x 32 to 12 x 32 and 6 x 64 ran at 255-265 GFLOP/s per core in registers, and
 * these 16 accumulators leave room for two rows of B and a broadcast). Between blocks the sums
 * wait in C (storing and reloading a float is exact). Jobs are shared by a dynamic schedule:
 * each computes its own elements, so the order of jobs changes no bit, and on a loaded machine
 * a thread that runs on takes the jobs of one that was descheduled. */
#ifndef GRADC_MM_H
#define GRADC_MM_H

#define GC_MM_MR 8
#define GC_MM_NV 2
#define GC_MM_MC 128
#define GC_MM_NC 256
#define GC_MM_KC 256

#define GC_MM_DEFINE(T, SFX, V, LANES)                                                          \
enum { GC_MM_NR_##SFX = GC_MM_NV * LANES };                                                    \
/* One tile over a block of kb steps: acc = (fresh ? 0 : C) + the products, then (addc: a      \
 * later segment) C + acc. Row r's element of step kk is a[r * sr + kk * sk]. */                \
static inline void gc_mm_tile_##SFX(int64_t kb, const T *restrict a, int64_t sr, int64_t sk,    \
                                    int64_t h, const T *restrict bp, T *restrict c,             \
                                    int64_t ldc, int fresh, int addc) {                         \
  V acc[GC_MM_MR][GC_MM_NV];                                                                    \
  GC_UNROLL for (int r = 0; r < GC_MM_MR; r++) GC_UNROLL for (int v = 0; v < GC_MM_NV; v++) {   \
    if (fresh) acc[r][v] = (V){0};                                                              \
    else memcpy(&acc[r][v], c + r * ldc + v * LANES, sizeof(V)); }                             \
  const T *ar[GC_MM_MR];                                                                        \
  GC_UNROLL for (int r = 0; r < GC_MM_MR; r++) ar[r] = a + (r < h ? r : h - 1) * sr;          \
  for (int64_t kk = 0; kk < kb; kk++) {                                                         \
    V b[GC_MM_NV];                                                                              \
    GC_UNROLL for (int v = 0; v < GC_MM_NV; v++)                                                \
      b[v] = *(const V *)(bp + kk * GC_MM_NR_##SFX + v * LANES);                                \
    GC_UNROLL for (int r = 0; r < GC_MM_MR; r++) {                                              \
      const T x = ar[r][kk * sk];                                                               \
      GC_UNROLL for (int v = 0; v < GC_MM_NV; v++) {                                            \
        const V p = b[v] * x; acc[r][v] = acc[r][v] + p; } }                                    \
  }                                                                                             \
  GC_UNROLL for (int r = 0; r < GC_MM_MR; r++) GC_UNROLL for (int v = 0; v < GC_MM_NV; v++) {   \
    if (addc) { V o; memcpy(&o, c + r * ldc + v * LANES, sizeof(V)); acc[r][v] = o + acc[r][v]; }\
    memcpy(c + r * ldc + v * LANES, &acc[r][v], sizeof(V)); }                                  \
}                                                                                               \
/* The same tile for consecutive rows (sr == 1): one pointer, step kk's row at a + kk * sk. */  \
static inline void gc_mm_tilec_##SFX(int64_t kb, const T *restrict a, int64_t sk,               \
                                     const T *restrict bp, T *restrict c, int64_t ldc,          \
                                     int fresh, int addc) {                                     \
  V acc[GC_MM_MR][GC_MM_NV];                                                                    \
  GC_UNROLL for (int r = 0; r < GC_MM_MR; r++) GC_UNROLL for (int v = 0; v < GC_MM_NV; v++) {   \
    if (fresh) acc[r][v] = (V){0};                                                              \
    else memcpy(&acc[r][v], c + r * ldc + v * LANES, sizeof(V)); }                             \
  for (int64_t kk = 0; kk < kb; kk++) {                                                         \
    V b[GC_MM_NV];                                                                              \
    const T *ak = a + kk * sk;                                                                  \
    GC_UNROLL for (int v = 0; v < GC_MM_NV; v++)                                                \
      b[v] = *(const V *)(bp + kk * GC_MM_NR_##SFX + v * LANES);                                \
    GC_UNROLL for (int r = 0; r < GC_MM_MR; r++) {                                              \
      const T x = ak[r];                                                                        \
      GC_UNROLL for (int v = 0; v < GC_MM_NV; v++) {                                            \
        const V p = b[v] * x; acc[r][v] = acc[r][v] + p; } }                                    \
  }                                                                                             \
  GC_UNROLL for (int r = 0; r < GC_MM_MR; r++) GC_UNROLL for (int v = 0; v < GC_MM_NV; v++) {   \
    if (addc) { V o; memcpy(&o, c + r * ldc + v * LANES, sizeof(V)); acc[r][v] = o + acc[r][v]; }\
    memcpy(c + r * ldc + v * LANES, &acc[r][v], sizeof(V)); }                                  \
}                                                                                               \
/* Panels of op(B) for steps [k0, k0 + kb) (one segment or within one), columns [n0, n0+NR). */ \
static inline void gc_mm_packb_##SFX(T *restrict d, const T *restrict b, int64_t kb,            \
                                     int64_t sbk, int64_t sbn, int64_t w) {                     \
  enum { NR = GC_MM_NR_##SFX };                                                                 \
  if (sbn == 1) {                                                                               \
    for (int64_t kk = 0; kk < kb; kk++) {                                                       \
      for (int64_t j = 0; j < w; j++) d[kk * NR + j] = b[kk * sbk + j];                         \
      for (int64_t j = w; j < NR; j++) d[kk * NR + j] = 0;                                      \
    }                                                                                           \
  } else {                                                                                      \
    for (int64_t j = 0; j < NR; j++) {                                                          \
      if (j < w) for (int64_t kk = 0; kk < kb; kk++) d[kk * NR + j] = b[j * sbn + kk * sbk];    \
      else for (int64_t kk = 0; kk < kb; kk++) d[kk * NR + j] = 0;                              \
    }                                                                                           \
  }                                                                                             \
}                                                                                               \
static inline __attribute__((unused)) int gc_mm_##SFX(                                         \
    int64_t nbatch, int64_t M, int64_t N, int64_t K, int64_t kseg,                              \
    const T *restrict A, const int64_t *restrict oa, int64_t sam, int64_t sak, int64_t sas,     \
    const T *restrict B, const int64_t *restrict ob, int64_t sbk, int64_t sbn, int64_t sbs,     \
    T *restrict C, int64_t ldc, int nt) {                                                       \
  enum { NR = GC_MM_NR_##SFX, MR = GC_MM_MR };                                                  \
  const int64_t NP = (N + NR - 1) / NR, KB = kseg ? kseg : GC_MM_KC;                            \
  /* op(B) of one batch packed whole (it is read by every row), panel-major:                   \
   * bpk[(p * K + k) * NR + j]; one copy per batch that has its own B (ob). */                  \
  const int64_t nbp = ob ? nbatch : 1;                                                          \
  T *bpk = (T *)gc_alloc((size_t)(nbp * NP * NR) * (size_t)K * sizeof(T));                      \
  if (!bpk) return 1;                                                                           \
  const int64_t nmc = (M + GC_MM_MC - 1) / GC_MM_MC, npg = (NP * NR + GC_MM_NC - 1) / GC_MM_NC; \
  const int64_t J = nbatch * nmc * npg, PG = GC_MM_NC / NR;                                     \
  (void)nt;                                                                                     \
  _Pragma("omp parallel num_threads(nt) if(J > 1 && (double)M * N * K * nbatch > GC_PAR_MIN)") \
  {                                                                                             \
  _Pragma("omp for schedule(static)")                                                           \
  for (int64_t q = 0; q < nbp * NP * ((K + KB - 1) / KB); q++) { /* pack: (batch, panel, blk) */\
    const int64_t nkb = (K + KB - 1) / KB, bi = q / (NP * nkb), p = q / nkb % NP;               \
    const int64_t k0 = q % nkb * KB, kb = K - k0 < KB ? K - k0 : KB;                            \
    const int64_t w = N - p * NR < NR ? N - p * NR : NR;                                        \
    const int64_t seg = kseg ? k0 / kseg : 0, kin = kseg ? 0 : k0;                              \
    gc_mm_packb_##SFX(bpk + ((bi * NP + p) * K + k0) * NR,                                      \
                      B + (ob ? ob[bi] : 0) + seg * sbs + kin * sbk + p * NR * sbn, kb, sbk, sbn, w);\
  }                                                                                             \
  _Alignas(64) T tile[MR * NR];                                                                 \
  _Pragma("omp for schedule(dynamic, 1)")                                                       \
  for (int64_t job = 0; job < J; job++) {                                                       \
    const int64_t bi = job / (nmc * npg), m0 = job / npg % nmc * GC_MM_MC;                      \
    const int64_t p0 = job % npg * PG, p1 = p0 + PG < NP ? p0 + PG : NP;                        \
    const int64_t mb = M - m0 < GC_MM_MC ? M - m0 : GC_MM_MC;                                   \
    const T *a0 = A + (oa ? oa[bi] : 0) + m0 * sam;                                             \
    const T *bb = bpk + (ob ? bi : 0) * NP * K * NR;                                            \
    T *c0 = C + bi * M * ldc + m0 * ldc;                                                        \
    for (int64_t k0 = 0; k0 < K; k0 += KB) {                                                    \
      const int64_t kb = K - k0 < KB ? K - k0 : KB;                                             \
      const int64_t seg = kseg ? k0 / kseg : 0, kin = kseg ? 0 : k0;                            \
      const T *as = a0 + seg * sas + kin * sak;                                                 \
      const int fresh = kseg ? 1 : k0 == 0, addc = kseg && k0 > 0;                              \
      for (int64_t p = p0; p < p1; p++) {                                                       \
        const int64_t w = N - p * NR < NR ? N - p * NR : NR;                                    \
        const T *bp = bb + (p * K + k0) * NR;                                                   \
        for (int64_t i = 0; i < mb; i += MR) {                                                  \
          const int64_t h = mb - i < MR ? mb - i : MR;                                          \
          T *c = c0 + i * ldc + p * NR;                                                         \
          const int full = h == MR && w == NR;                                                  \
          T *dst = full ? c : tile;                                                             \
          const int64_t ld = full ? ldc : NR;                                                   \
          if (!full)                                                                            \
            for (int64_t r = 0; r < MR; r++)                                                    \
              for (int64_t j = 0; j < NR; j++)                                                  \
                tile[r * NR + j] = r < h && j < w && (!fresh || addc) ? c[r * ldc + j] : 0;     \
          if (h == MR && sam == 1) gc_mm_tilec_##SFX(kb, as + i, sak, bp, dst, ld, fresh, addc); \
          else gc_mm_tile_##SFX(kb, as + i * sam, sam, sak, h, bp, dst, ld, fresh, addc);       \
          if (!full)                                                                            \
            for (int64_t r = 0; r < h; r++)                                                     \
              for (int64_t j = 0; j < w; j++) c[r * ldc + j] = tile[r * NR + j];                \
        }                                                                                       \
      }                                                                                         \
    }                                                                                           \
  }                                                                                             \
  }                                                                                             \
  free(bpk);                                                                                    \
  return 0;                                                                                     \
}
GC_MM_DEFINE(float, f32, gc_vf32, 16)
GC_MM_DEFINE(double, f64, gc_vf64, 8)

#endif  /* GRADC_MM_H */
