/* x86's NaN results on the GPU: the last part of every generated CUDA program's prelude (after the
 * C target's numeric helpers, whose bit casts it uses).
 *
 * The reference and the C target run on x86-64, whose SSE arithmetic makes a NaN result from
 * - the first NaN operand, quieted: its sign and payload kept, the quiet bit set;
 * - else, for an invalid operation (inf - inf, 0 * inf, 0 / 0, inf / inf, sqrt(-1)), the
 *   "default NaN": sign set, quiet, payload 0 (0xffc00000, 0xfff8000000000000);
 * and converts between float and double keeping sign and payload (quieted). glibc's functions
 * return their NaN argument quieted and the default NaN for an invalid argument.
 * An NVIDIA GPU returns its canonical NaN (0x7fffffff) from add/sub/mul/div/sqrt.f32 whatever
 * the operands, and its `neg` of a NaN is not a sign flip. So the CUDA dialect of the
 * element-wise expressions (backends/cuda/scalar.py) calls these helpers: each computes the
 * operation natively and, only where the result is NaN, replaces it by x86's NaN, chosen with
 * comparisons and integer bit operations (selects: no branch), so the result is the reference's
 * bits whatever NaN the hardware made (the host harness checks it by making every NaN canonical,
 * host_gpunan.h). A number result is the native one: IEEE, correctly rounded on both.
 */
GC_INLINE double gc_x86_bits2d(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }

/* r, or x86's NaN of an operation on (a, b) when r is NaN */
GC_INLINE float gc_nan2_f32(float a, float b, float r) {
    const uint32_t q = a != a ? gc_f2bits(a) | 0x00400000u
                     : (b != b ? gc_f2bits(b) | 0x00400000u : 0xffc00000u);
    return r != r ? gc_bits2f(q) : r;
}
GC_INLINE double gc_nan2_f64(double a, double b, double r) {
    const uint64_t quiet = UINT64_C(0x0008000000000000);
    const uint64_t q = a != a ? gc_d2bits(a) | quiet
                     : (b != b ? gc_d2bits(b) | quiet : UINT64_C(0xfff8000000000000));
    return r != r ? gc_x86_bits2d(q) : r;
}
/* r, or x86's NaN of a function of a when r is NaN */
GC_INLINE float gc_nan1_f32(float a, float r) {
    const uint32_t q = a != a ? gc_f2bits(a) | 0x00400000u : 0xffc00000u;
    return r != r ? gc_bits2f(q) : r;
}
GC_INLINE double gc_nan1_f64(double a, double r) {
    const uint64_t q = a != a ? gc_d2bits(a) | UINT64_C(0x0008000000000000)
                              : UINT64_C(0xfff8000000000000);
    return r != r ? gc_x86_bits2d(q) : r;
}

GC_INLINE float gc_add_f32(float a, float b) { return gc_nan2_f32(a, b, a + b); }
GC_INLINE float gc_sub_f32(float a, float b) { return gc_nan2_f32(a, b, a - b); }
GC_INLINE float gc_mul_f32(float a, float b) { return gc_nan2_f32(a, b, a * b); }
GC_INLINE float gc_div_f32(float a, float b) { return gc_nan2_f32(a, b, a / b); }
GC_INLINE float gc_sqrt_f32(float a) { return gc_nan1_f32(a, sqrtf(a)); }
GC_INLINE double gc_add_f64(double a, double b) { return gc_nan2_f64(a, b, a + b); }
GC_INLINE double gc_sub_f64(double a, double b) { return gc_nan2_f64(a, b, a - b); }
GC_INLINE double gc_mul_f64(double a, double b) { return gc_nan2_f64(a, b, a * b); }
GC_INLINE double gc_div_f64(double a, double b) { return gc_nan2_f64(a, b, a / b); }
GC_INLINE double gc_sqrt_f64(double a) { return gc_nan1_f64(a, sqrt(a)); }

/* negation flips the sign bit (x86's xorps), NaN or not */
GC_INLINE float gc_neg_f32(float a) { return gc_bits2f(gc_f2bits(a) ^ 0x80000000u); }
GC_INLINE double gc_neg_f64(double a) {
    return gc_x86_bits2d(gc_d2bits(a) ^ UINT64_C(0x8000000000000000));
}

/* float <-> double as cvtss2sd / cvtsd2ss: a NaN keeps its sign and the top of its payload */
GC_INLINE double gc_f2d(float a) {
    const uint32_t u = gc_f2bits(a);
    const uint64_t n = ((uint64_t)(u & 0x80000000u) << 32) | UINT64_C(0x7ff8000000000000)
                       | ((uint64_t)(u & 0x003fffffu) << 29);
    return a != a ? gc_x86_bits2d(n) : (double)a;
}
GC_INLINE float gc_d2f(double a) {
    const uint64_t u = gc_d2bits(a);
    const uint32_t n = (uint32_t)(u >> 32 & 0x80000000u) | 0x7fc00000u
                       | (uint32_t)(u >> 29 & 0x003fffffu);
    return a != a ? gc_bits2f(n) : (float)a;
}
/* a result of the C prelude's gelu slopes, whose only NaN is the literal (double)NAN */
GC_INLINE double gc_nanlit_f64(double r) {
    return r != r ? gc_x86_bits2d(UINT64_C(0x7ff8000000000000)) : r;
}
