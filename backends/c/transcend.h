/* gradc transcend.h: the C target's transcendental functions in double, written so that GCC
 * vectorizes the loops that call them (appended to prelude.h; backends/c/prelude.py).
 *
 * libm's exp, log, tanh, erf, sin, cos are scalar calls: a loop that calls one is not
 * vectorized (GELU over 1M floats took 39 ms). Every function here is branch-free straight-line
 * code on doubles and 64-bit integers (bit patterns through memcpy, integer conversions through
 * the 1.5 * 2^52 "magic" addition, no int64 <-> double instructions, so AVX2 vectorizes them as
 * well as AVX-512); special values and ranges are chosen by bit-mask selects (gc_sel). Each
 * evaluates in double to within about 1-2 double ulps (erfc's far tail 8), so a
 * float32 or float16 result rounded once from it equals the reference's (float64 function,
 * rounded once) except where the exact value lies within ~1e-16 relative of a rounding
 * boundary; a float64 result is within 4 ulps of NumPy's / the C library's (the tolerance of
 * transcendental functions; benchmarks/bench_transcendental.py measures both). The polynomials
 * use fused multiply-adds where the machine has them (GC_FMA), so the last bits of a result may
 * differ between machines with and without FMA; the error bounds hold for both.
 *
 * - gc_exp_core(x, xl) = e^(x + xl) (xl a small correction): k = round(x / ln 2), r = x + xl - k
 *   ln 2 (Cody-Waite, ln 2 in two parts), e^r = 1 + r + r^2 Q(r) (degree 9), times 2^k as two
 *   exact powers of two (subnormal results rounded once). x is clamped to [-746, 710] (0 and
 *   inf beyond); NaN propagates.
 * - gc_log: fdlibm's scheme (x = 2^k m, m in [sqrt(2)/2, sqrt(2)), s = f / (2 + f),
 *   log(1 + f) = f - (f^2/2 - s (f^2/2 + R(s^2)))), subnormals scaled by 2^54 first.
 * - gc_tanh: x + x z R(z) (z = x^2, degree 11) for |x| < 0.625, else 1 - 2 / (e^(2|x|) + 1).
 * - gc_erfc(x) = e^(-a^2) N(a) / D(a), a = |x| <= 27.5 (a rational fit of erfcx, degrees 10/11,
 *   positive coefficients), a^2 split exactly into two doubles for the exponential; 2 - that
 *   for x < 0. gc_erf: a E(a^2) (degree 11) below 1, 1 - erfc(a) above, with x's sign.
 * - gc_sin, gc_cos: x reduced by pi/2 to y0 + y1 in [-pi/4, pi/4] and a quadrant: below 2^20
 *   with pi/2 in three 33-bit parts (fdlibm's medium case, exact products), above it exactly
 *   (Payne-Hanek: the 53-bit mantissa times a 192-bit window of 2/pi picked by the exponent,
 *   in 32-bit limbs; the window's words are gathered from gc_2opi); fdlibm's sin and cos
 *   kernels on (y0, y1).
 * - gc_gelu_* / gc_gelu_*_slope: gelu (erf and tanh forms) and its derivative in double, the
 *   operations of gradc.ir.ops.activation.gelu64 / gelu_slope64 in their order, with gc_erfc
 *   and gc_exp.
 *
 * The fitted constants are derived by benchmarks/fit_transcendental.py (mpmath), which rewrites
 * the block between its markers.
 */
#ifndef GRADC_TRANSCEND_H
#define GRADC_TRANSCEND_H

/* a * b + c: one fused operation where the machine has one (an explicit fma is not a
 * contraction: -ffp-contract=off leaves it), else two roundings. The polynomials below take
 * half the instructions with it; their error bounds hold either way. */
#if defined(__CUDACC__)  /* the cuda target (NVRTC): the GPU's fused multiply-add */
#define GC_FMA(a, b, c) fma((a), (b), (c))
#elif defined(__FMA__) || defined(__aarch64__)
#define GC_FMA(a, b, c) __builtin_fma((a), (b), (c))
#else
#define GC_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* -- fitted constants (benchmarks/fit_transcendental.py) -- */
#define GC_LN2_HI 0x1.62e42fee00000p-1  /* ln 2: 32 bits, k * GC_LN2_HI exact */
#define GC_LN2_LO 0x1.a39ef35793c76p-33
#define GC_INV_LN2 0x1.71547652b82fep+0
#define GC_EXP_Q(x) (GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, 0x1.af3cd7b3560d9p-26, 0x1.2894eb03786e2p-22), 0x1.71de0be80e7e8p-19), 0x1.a019b62aaa671p-16), 0x1.a01a01a83a3a3p-13), 0x1.6c16c1794bd5cp-10), 0x1.111111111091ap-7), 0x1.5555555553b72p-5), 0x1.5555555555556p-3), 0x1.0000000000001p-1))
#define GC_LOG_R(x) (GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, 0x1.2b5a8aca255fdp-3, 0x1.39fe31c77715cp-3), 0x1.7462b61242bb4p-3), 0x1.c71c62e0922bcp-3), 0x1.2492492df5266p-2), 0x1.99999999952bfp-2), 0x1.5555555555558p-1))
#define GC_TANH_R(x) (GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, 0x1.b33642a122cddp-18, -0x1.05bbdae896297p-15), 0x1.8445870f6fe41p-14), -0x1.f243823c8c981p-13), 0x1.3526e9ed54da1p-11), -0x1.7d9f6f23e8682p-10), 0x1.d6d39ae3905e2p-9), -0x1.226e3473dce5cp-7), 0x1.664f487e0a749p-6), -0x1.ba1ba1ba0f126p-5), 0x1.11111111110a8p-3), -0x1.5555555555555p-2))
#define GC_ERF_E(x) (GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, -0x1.ac9585a44fe29p-31, 0x1.d76af6ca49787p-27), -0x1.5c131500d3f88p-23), 0x1.b981d78881a5dp-20), -0x1.f4ca838adb73bp-17), 0x1.f9a2be4f731a1p-14), -0x1.c02db0665e53dp-11), 0x1.565bccfa44156p-8), -0x1.b82ce31203772p-6), 0x1.ce2f21a040f66p-4), -0x1.812746b0379c1p-2), 0x1.20dd750429b6dp+0))
#define GC_SIN_S1 -0x1.5555555555555p-3
#define GC_SIN_R(x) (GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, 0x1.5e0b05bff20f2p-33, -0x1.ae600aca92c64p-26), 0x1.71de379654304p-19), -0x1.a01a019e83816p-13), 0x1.1111111110bb2p-7))
#define GC_COS_C(x) (GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, -0x1.907d8f29fe831p-37, 0x1.1eeb68cd22f56p-29), -0x1.27e4fa17bf139p-22), 0x1.a01a019f4e9b4p-16), -0x1.6c16c16c16967p-10), 0x1.5555555555555p-5))
#define GC_ERFCX_N(x) (GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, 0x1.f04bf431397c0p-17, 0x1.539c4aaafeb28p-12), 0x1.c8c1ceb2fd4c8p-9), 0x1.88823d9c9e935p-6), 0x1.d9e4da0f93931p-4), 0x1.a253b54cfec21p-2), 0x1.11116e4bcc36ep+0), 0x1.04a2ada05fd67p+1), 0x1.5dae64f3724afp+1), 0x1.2c83f59bbc4f3p+1), 0x1.0000000000000p+0))
#define GC_ERFCX_D(x) (GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, GC_FMA(x, 0x1.b7d4dcc9f0c42p-16, 0x1.2cf8d3cf96085p-11), 0x1.95a6426c85353p-8), 0x1.5e3402dcd972cp-5), 0x1.aa468cbe9645fp-3), 0x1.7d74bfa98074fp-1), 0x1.fd778a97e5909p+0), 0x1.f9ae23972934cp+1), 0x1.6c5222c10d0eep+2), 0x1.69e029fc970f5p+2), 0x1.bcf2b01dd12aap+1), 0x1.0000000000000p+0))
/* pi/2 in three 33-bit parts and their tails: n * part is exact for n < 2^20 */
#define GC_PIO2_1 0x1.921fb54400000p+0
#define GC_PIO2_1T 0x1.0b4611a626331p-34
#define GC_PIO2_2 0x1.0b4611a600000p-34
#define GC_PIO2_2T 0x1.3198a2e037073p-69
#define GC_PIO2_3 0x1.3198a2e000000p-69
#define GC_PIO2_3T 0x1.b839a252049c1p-104
#define GC_INV_PIO2 0x1.45f306dc9c883p-1
#define GC_PIO2_H 0x1.921fb54442d18p+0  /* pi/2 = H + L */
#define GC_PIO2_L 0x1.1a62633145c07p-54
/* 2/pi after the binary point, 32 bits a word, after two zero words */
static const uint32_t gc_2opi[40] = {
    0x00000000u, 0x00000000u, 0xa2f9836eu, 0x4e441529u, 0xfc2757d1u, 0xf534ddc0u,
    0xdb629599u, 0x3c439041u, 0xfe5163abu, 0xdebbc561u, 0xb7246e3au, 0x424dd2e0u,
    0x06492eeau, 0x09d1921cu, 0xfe1deb1cu, 0xb129a73eu, 0xe88235f5u, 0x2ebb4484u,
    0xe99c7026u, 0xb45f7e41u, 0x3991d639u, 0x835339f4u, 0x9c845f8bu, 0xbdf9283bu,
    0x1ff897ffu, 0xde05980fu, 0xef2f118bu, 0x5a0a6d1fu, 0x6d367ecfu, 0x27cb09b7u,
    0x4f463f66u, 0x9e5fea2du, 0x7527bac7u, 0xebe5f17bu, 0x3d0739f7u, 0x8a5292eau,
    0x6bfb5fb1u, 0x1f8d5d08u, 0x56033046u, 0xfc7b6babu};
/* -- end -- */

#define GC_MAGIC 0x1.8p52  /* x + GC_MAGIC - GC_MAGIC rounds x to an integer (|x| < 2^51) */
#define GC_MAGIC_BITS UINT64_C(0x4338000000000000)

GC_INLINE double gc_bits2d(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }
/* c ? a : b as bit operations on both values. A conditional expression is control flow until
 * GCC if-converts it, and GCC first sinks each operand's computation into the branch that uses
 * it: there, a float -> double conversion (which may trap on a signaling NaN) blocks the
 * if-conversion and the loop stays scalar ("control flow in loop"). Masks leave no branch. */
GC_INLINE uint64_t gc_selu(int c, uint64_t a, uint64_t b) {
  const uint64_t m = (uint64_t)0 - (uint64_t)(c != 0);
  return (a & m) | (b & ~m);
}
GC_INLINE double gc_sel(int c, double a, double b) {
  return gc_bits2d(gc_selu(c, gc_d2bits(a), gc_d2bits(b)));
}
/* 2^k for t = k + GC_MAGIC (k an integer in [-1022, 1023]), built from its bits */
GC_INLINE double gc_exp2i(double t) {
  return gc_bits2d((gc_d2bits(t) - GC_MAGIC_BITS + 1023u) << 52);
}
/* |x|, and x with the sign of s (bit operations: -0.0 and NaN keep their bits) */
GC_INLINE double gc_abs(double x) {
  return gc_bits2d(gc_d2bits(x) & UINT64_C(0x7fffffffffffffff));
}
GC_INLINE double gc_copysign(double x, double s) {
  return gc_bits2d((gc_d2bits(x) & UINT64_C(0x7fffffffffffffff)) |
                   (gc_d2bits(s) & UINT64_C(0x8000000000000000)));
}

GC_INLINE double gc_exp_core(double x, double xl) {
  const double c = gc_sel(x > 710.0, 710.0, gc_sel(x < -746.0, -746.0, x));  /* NaN stays */
  const double t = GC_FMA(c, GC_INV_LN2, GC_MAGIC), k = t - GC_MAGIC;
  const double r = GC_FMA(-k, GC_LN2_LO, (c - k * GC_LN2_HI) + xl);  /* c - k ln2_hi: exact */
  const double p = 1.0 + GC_FMA(r * r, GC_EXP_Q(r), r);
  /* 2^k as 2^k1 * 2^k2 (each within the normal range): p * 2^k1 is exact, one rounding */
  const double t1 = GC_FMA(k, 0.5, GC_MAGIC), t2 = (k - (t1 - GC_MAGIC)) + GC_MAGIC;
  return p * gc_exp2i(t1) * gc_exp2i(t2);
}
GC_INLINE double gc_exp(double x) { return gc_exp_core(x, -0.0); }  /* + -0.0 folds away */
GC_INLINE double gc_sigmoid(double x) { return 1.0 / (1.0 + gc_exp(-x)); }

/* pow(x, e) for the exponents backends/c/elementwise_math.py takes apart, with C's pow at the
 * special values: pow(-0, 1/2) = +0, pow(-inf, 1/2) = +inf, pow(-0, -1/2) = +inf,
 * pow(-inf, -1/2) = +0, pow(NaN, 0) = 1. */
GC_INLINE double gc_pow_0(double x) { (void)x; return 1.0; }
GC_INLINE double gc_pow_1(double x) { return x; }
GC_INLINE double gc_pow_2(double x) { return x * x; }
GC_INLINE double gc_pow_3(double x) { return x * x * x; }
GC_INLINE double gc_pow_m1(double x) { return 1.0 / x; }
GC_INLINE double gc_pow_m2(double x) { return 1.0 / (x * x); }
GC_INLINE double gc_pow_h(double x) {
  return gc_sel(x == -(double)INFINITY, (double)INFINITY, sqrt(x) + 0.0);
}
GC_INLINE double gc_pow_mh(double x) {
  return gc_sel(x == -(double)INFINITY, 0.0, 1.0 / (sqrt(x) + 0.0));
}

GC_INLINE double gc_log(double x) {
  const int sub = x < 0x1p-1022;  /* subnormal (x <= 0 and NaN are selected at the end) */
  const uint64_t hx = gc_d2bits(gc_sel(sub, x * 0x1p54, x)), hi = hx >> 32;
  const uint64_t hm = hi & 0xfffffu, i = (hm + 0x95f64u) & 0x100000u;
  /* m = x / 2^k in [sqrt(2)/2, sqrt(2)); k + GC_MAGIC from the exponent's bits */
  const double m = gc_bits2d(((hm | (i ^ 0x3ff00000u)) << 32) | (hx & 0xffffffffu));
  const uint64_t kb = ((hi >> 20) & 0x7ffu) + (i >> 20) - (uint64_t)(54 * sub);
  const double k = gc_bits2d(GC_MAGIC_BITS + kb - 1023u) - GC_MAGIC;
  const double f = m - 1.0, s = f / (2.0 + f), z = s * s;
  const double R = z * GC_LOG_R(z), hfsq = 0.5 * f * f;
  double y = k * GC_LN2_HI - ((hfsq - (s * (hfsq + R) + k * GC_LN2_LO)) - f);
  y = gc_sel(x == 0, -(double)INFINITY, y);
  y = gc_sel(x < 0, (double)NAN, y);
  y = gc_sel(x == (double)INFINITY, x, y);
  return gc_sel(x != x, x + x, y);
}

GC_INLINE double gc_tanh(double x) {
  const double a = gc_abs(x), z = x * x;
  const double small = GC_FMA(x, z * GC_TANH_R(z), x);
  const double big = gc_copysign(1.0 - 2.0 / (gc_exp(2.0 * a) + 1.0), x);
  return gc_sel(x == 0, x, gc_sel(a < 0.625, small, big));  /* x == 0: -0.0 */
}

/* e = a * b - p exactly, for p = a * b rounded (|a|, |b| far from overflow): one fma, or
 * Dekker's product (a and b split into 26-bit halves) without one */
GC_INLINE double gc_two_prod(double a, double b, double p) {
#if defined(__FMA__) || defined(__aarch64__)
  return __builtin_fma(a, b, -p);
#else
  const double ca = a * 134217729.0, ah = ca - (ca - a), al = a - ah;
  const double cb = b * 134217729.0, bh = cb - (cb - b), bl = b - bh;
  return ((ah * bh - p) + ah * bl + al * bh) + al * bl;
#endif
}

/* erfc(x) = e^(-a^2) erfcx(a), a = |x| (clamped at 27.5, where erfc underflows to 0), from
 * ea = e^(-a^2) and erfcx's rational fit (positive coefficients: no cancellation) */
GC_INLINE double gc_erfc_from(double x, double a, double ea) {
  const double r = ea * (GC_ERFCX_N(a) / GC_ERFCX_D(a));
  return gc_sel(x != x, x + x, gc_sel(x < 0, 2.0 - r, r));
}
/* a = min(|x|, 27.5) and a^2 = h + l exactly */
GC_INLINE double gc_erfc_arg(double x, double *h, double *l) {
  const double a0 = gc_abs(x), a = gc_sel(a0 < 27.5, a0, 27.5);
  *h = a * a;
  *l = gc_two_prod(a, a, *h);
  return a;
}
GC_INLINE double gc_erfc(double x) {
  double h, l;
  const double a = gc_erfc_arg(x, &h, &l);
  return gc_erfc_from(x, a, gc_exp_core(-h, -l));
}
GC_INLINE double gc_erf(double x) {
  const double a = gc_abs(x);
  const double small = a * GC_ERF_E(a * a);
  const double big = 1.0 - gc_erfc(a);
  return gc_sel(x != x, x + x, gc_copysign(gc_sel(a < 1.0, small, big), x));
}

/* sin and cos: the reduced argument y0 + y1 (|y0| <= pi/4 + tiny) and the quadrant q mod 4 */
typedef struct { double y0, y1; uint64_t q; } gc_rpio2;

/* fdlibm's medium reduction, all three steps: a < 2^20 */
GC_INLINE gc_rpio2 gc_rem_pio2_medium(double a) {
  const double t0 = a * GC_INV_PIO2 + GC_MAGIC, n = t0 - GC_MAGIC;
  double r = a - n * GC_PIO2_1, w = n * GC_PIO2_1T;
  double t = r;
  w = n * GC_PIO2_2; r = t - w; w = n * GC_PIO2_2T - ((t - r) - w);
  t = r;
  w = n * GC_PIO2_3; r = t - w; w = n * GC_PIO2_3T - ((t - r) - w);
  gc_rpio2 o;
  o.y0 = r - w;
  o.y1 = (r - o.y0) - w;
  o.q = gc_d2bits(t0) & 3u;
  return o;
}


/* Payne-Hanek: a = m 2^(e-52) with e >= 20 (finite or not: the result is selected away for
 * inf and NaN). With i0 = e - 54, the bits of 2/pi before bit i0 + 1 make m 2^(e-52) times them
 * a multiple of 4, so a 2/pi = P 2^-190 (mod 4) where P = m W and W is the 192-bit window of
 * bits i0 + 1 .. i0 + 192 (what is left out is below 2^-137). P mod 2^192 is computed in 32-bit
 * limbs: the quadrant is bits 191..190, the fraction bits 189..62 as a signed 128-bit number
 * (a fraction >= 1/2 counts as f - 1 in the next quadrant), scaled by pi/2 in double-double. */
GC_INLINE gc_rpio2 gc_rem_pio2_large(double a) {
  const uint64_t bits = gc_d2bits(a);
  uint64_t e = (bits >> 52) & 0x7ffu;
  e = gc_selu(e < 1043u, 1043u, e);  /* e >= 20 (biased 1043): indices stay in range */
  const uint64_t m = (bits & UINT64_C(0xfffffffffffff)) | (UINT64_C(1) << 52);
  const uint64_t p = e - 1023u - 54u + 64u;  /* bit position of i0 + 1 in gc_2opi, >= 30 */
  const uint64_t j = p >> 5, s = p & 31u;
  uint64_t w[6];
  for (int k = 0; k < 6; k++)  /* w[0] most significant */
    w[k] = ((((uint64_t)gc_2opi[j + k] << 32) | gc_2opi[j + k + 1]) >> (32u - s)) &
           0xffffffffu;
  const uint64_t ml = m & 0xffffffffu, mh = m >> 32;
  uint64_t lp[6], acc = 0;  /* limbs of P, lp[0] least significant */
  for (int k = 0; k < 6; k++) {
    const uint64_t lo1 = ml * w[5 - k];
    const uint64_t hi1 = k >= 1 ? (ml * w[6 - k]) >> 32 : 0;
    const uint64_t lo2 = k >= 1 ? (mh * w[6 - k]) & 0xffffffffu : 0;
    const uint64_t hi2 = k >= 2 ? (mh * w[7 - k]) >> 32 : 0;
    acc += (lo1 & 0xffffffffu) + hi1 + lo2 + hi2;
    lp[k] = acc & 0xffffffffu;
    acc >>= 32;
  }
  const uint64_t fh = ((lp[5] & 0x3fffffffu) << 34) | (lp[4] << 2) | (lp[3] >> 30);
  const uint64_t fl = ((lp[3] & 0x3fffffffu) << 34) | (lp[2] << 2) | (lp[1] >> 30);
  /* F = fh 2^64 + fl as a signed 128-bit number: c1 2^76 + c2 2^24 + c3 */
  const uint64_t c1 = (fh >> 12) ^ (UINT64_C(1) << 51);  /* 52-bit signed, offset by 2^51 */
  const uint64_t c2 = ((fh & 0xfffu) << 40) | (fl >> 24), c3 = fl & 0xffffffu;
  const double d1 = (gc_bits2d(UINT64_C(0x4330000000000000) | c1) - 0x1.8p52) * 0x1p-52;
  const double d2 = (gc_bits2d(UINT64_C(0x4330000000000000) | c2) - 0x1p52) * 0x1p-104;
  const double d3 = (double)(uint32_t)c3 * 0x1p-128;
  const double f0 = d1 + d2, f1 = ((d1 - f0) + d2) + d3;  /* the fraction, in [-1/2, 1/2) */
  const double y = f0 * GC_PIO2_H;
  const double ye = gc_two_prod(f0, GC_PIO2_H, y) + (f0 * GC_PIO2_L + f1 * GC_PIO2_H);
  gc_rpio2 o;
  o.y0 = y + ye;
  o.y1 = (y - o.y0) + ye;
  o.q = ((lp[5] >> 30) + (fh >> 63)) & 3u;
  return o;
}

GC_INLINE gc_rpio2 gc_rem_pio2(double a) {  /* a = |x| */
  const int medium = a < 0x1p20;
  const gc_rpio2 md = gc_rem_pio2_medium(gc_sel(medium, a, 0.0));
  const gc_rpio2 lg = gc_rem_pio2_large(a);
  gc_rpio2 o;
  o.y0 = gc_sel(medium, md.y0, lg.y0);
  o.y1 = gc_sel(medium, md.y1, lg.y1);
  o.q = gc_selu(medium, md.q, lg.q);
  return o;
}

/* fdlibm's __kernel_sin(x, y, 1) and __kernel_cos(x, y) on x + y, |x| <= pi/4 + tiny */
GC_INLINE double gc_sin_kernel(double x, double y) {
  const double z = x * x, v = z * x, r = GC_SIN_R(z);
  return x - ((z * (0.5 * y - v * r) - y) - v * GC_SIN_S1);
}
GC_INLINE double gc_cos_kernel(double x, double y) {
  const double z = x * x, r = z * GC_COS_C(z);
  /* qx = 0 below 0.3, 0.28125 above 0.78125, else |x|/4 truncated to its high word */
  const uint64_t ix = (gc_d2bits(x) >> 32) & 0x7fffffffu;
  double qx = gc_bits2d((ix - 0x00200000u) << 32);
  qx = gc_sel(ix > 0x3fe90000u, 0.28125, qx);
  qx = gc_sel(ix < 0x3fd33333u, 0.0, qx);
  const double hz = 0.5 * z - qx, a = 1.0 - qx;
  return a - (hz - (z * r - x * y));
}

GC_INLINE double gc_sin(double x) {
  const double a = gc_abs(x);
  const gc_rpio2 o = gc_rem_pio2(a);
  const double s = gc_sin_kernel(o.y0, o.y1), c = gc_cos_kernel(o.y0, o.y1);
  /* quadrants 2, 3 and a negative x flip the sign */
  const uint64_t flip = ((o.q & 2u) << 62) ^ (gc_d2bits(x) & UINT64_C(0x8000000000000000));
  const double y = gc_bits2d(gc_d2bits(gc_sel(o.q & 1u, c, s)) ^ flip);
  return gc_sel(a < 0x1p-27, x, gc_sel(a < (double)INFINITY, y, x - x));  /* inf, NaN: NaN */
}
GC_INLINE double gc_cos(double x) {
  const double a = gc_abs(x);
  const gc_rpio2 o = gc_rem_pio2(a);
  const double s = gc_sin_kernel(o.y0, o.y1), c = gc_cos_kernel(o.y0, o.y1);
  const uint64_t flip = ((o.q + 1u) & 2u) << 62;  /* quadrants 1 and 2 */
  const double y = gc_bits2d(gc_d2bits(gc_sel(o.q & 1u, s, c)) ^ flip);
  return gc_sel(a < 0x1p-27, 1.0, gc_sel(a < (double)INFINITY, y, x - x));
}

/* gelu (erf and tanh forms) in double. The constants are the float64 values of 1/sqrt(2),
   sqrt(2/pi), 1/sqrt(2 pi) and 3 * 0.044715 (gradc.ir.ops.activation's literals). */
GC_INLINE double gc_gelu_none(double x) { return x * (0.5 * gc_erfc(-x * 0.7071067811865476)); }
GC_INLINE double gc_gelu_tanh(double x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return x * (1 / (1 + gc_exp(-2 * u)));
}
/* cdf + x pdf: erfc's e^(-a^2) (a = |x| / sqrt 2 rounded, as the reference) is the pdf's
 * E = e^(-x x / 2) times e^c, c = x x / 2 - a^2 (|c| < 2^-46 x^2: e^c = 1 + c), so one exp
 * serves both. Where |x| >= 38, E underflows to 0 and so does erfc's factor. */
GC_INLINE double gc_gelu_none_slope(double x) {
  const double y = -x * 0.7071067811865476, xx = x * x;
  double h, l;
  const double a = gc_erfc_arg(y, &h, &l);
  const double E = gc_exp(xx * -0.5), c = (xx * 0.5 - h) - l;
  const double cdf = 0.5 * gc_erfc_from(y, a, gc_sel(gc_abs(x) < 38.0, E + E * c, 0.0));
  const double pdf = E * 0.3989422804014327;
  return gc_sel(gc_finite_d(x), cdf + x * pdf, (double)NAN);
}
/* p = 1 / (1 + E), q = 1 / (1 + 1/E) = E p with E = e^(-2u) (one exp; q = 1 where E = inf);
 * the second term 0 where p q underflows */
GC_INLINE double gc_gelu_tanh_slope(double x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  const double E = gc_exp(-2 * u), p = 1 / (1 + E);
  const double q = gc_sel(E < (double)INFINITY, E * p, 1.0), pq = p * q;
  const double second = 2 * x * pq * 0.7978845608028654 * (1 + 0.134145 * x * x);
  return gc_sel(gc_finite_d(x), p + gc_sel(pq == 0, 0.0, second), (double)NAN);
}

/* Rows of a softmax over trailing axes (backends/c/reduce.py), T float or double:
 * gc_rowmax_*: the largest of x[0..n) ignoring NaN, in 16 lanes (a vectorized maximum); -inf if
 * no element is above -inf. Which of equal maxima it takes does not show unless the maximum is
 * a zero (+0 and -0 compare equal), so there (and for -inf) the caller takes gc_rowfirst_*:
 * reduce_max's selection, the first maximum ignoring NaN (the first element if all are
 * NaN), in one pass of comparisons.
 * gc_rowexp_*: y[j] = exp(x[j] - mx) rounded to T (vectorized).
 * gc_rowsums_*: total[r] = the sum of row r of y[0..nr)[0..n) in increasing j from -0.0
 * (softmax's canonical order: one chain of additions per row). GC_ROWS rows at a time advance
 * their chains together, so the adder's latency is paid once for all of them. */
#define GC_ROWS 8
#define GC_DEFINE_ROW(T, SFX)                                                                  \
static inline __attribute__((unused)) T gc_rowmax_##SFX(const T *restrict x, int64_t n) {    \
  T m[16], mx = -(T)INFINITY;                                                                  \
  for (int l = 0; l < 16; l++) m[l] = -(T)INFINITY;                                           \
  const int64_t nb = n / 16;                                                                   \
  for (int64_t b = 0; b < nb; b++)                                                             \
    for (int l = 0; l < 16; l++) m[l] = x[16 * b + l] > m[l] ? x[16 * b + l] : m[l];         \
  for (int64_t j = 16 * nb; j < n; j++) mx = x[j] > mx ? x[j] : mx;                           \
  for (int l = 0; l < 16; l++) mx = m[l] > mx ? m[l] : mx;                                    \
  return mx;                                                                                   \
}                                                                                              \
static inline __attribute__((unused)) T gc_rowfirst_##SFX(const T *restrict x, int64_t n) {  \
  T m = n > 0 ? x[0] : 0;                                                                      \
  for (int64_t j = 1; j < n; j++)                                                              \
    if (x[j] == x[j] && (m != m || x[j] > m)) m = x[j];                                        \
  return m;                                                                                    \
}                                                                                              \
static inline __attribute__((unused)) void gc_rowexp_##SFX(const T *restrict x, T *restrict y,\
                                                          int64_t n, T mx) {                   \
  for (int64_t j = 0; j < n; j++) y[j] = (T)gc_exp((double)(T)(x[j] - mx));                  \
}                                                                                              \
static inline __attribute__((unused)) void gc_rowsums_##SFX(const T *restrict y, int64_t n,   \
                                                           int64_t nr, T *restrict total) {    \
  if (nr == GC_ROWS) {                                                                         \
    T t[GC_ROWS];                                                                              \
    for (int r = 0; r < GC_ROWS; r++) t[r] = -0.0;                                            \
    for (int64_t j = 0; j < n; j++)                                                            \
      for (int r = 0; r < GC_ROWS; r++) t[r] += y[r * n + j];                                 \
    for (int r = 0; r < GC_ROWS; r++) total[r] = t[r];                                        \
  } else {                                                                                     \
    for (int64_t r = 0; r < nr; r++) {                                                         \
      T t = -0.0;                                                                              \
      for (int64_t j = 0; j < n; j++) t += y[r * n + j];                                      \
      total[r] = t;                                                                            \
    }                                                                                          \
  }                                                                                            \
}
GC_DEFINE_ROW(float, f32)
GC_DEFINE_ROW(double, f64)

#endif  /* GRADC_TRANSCEND_H */
