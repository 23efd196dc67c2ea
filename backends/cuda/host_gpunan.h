/* gradc host harness, GPU NaN mode (backends/cuda/host.py; the default): included after host.h,
 * before the generated source, so that the kernels' floating-point arithmetic makes the NaNs a
 * GPU makes rather than x86's.
 *
 * x86 keeps a NaN operand's payload and sign and makes a negative "default NaN" for an invalid
 * operation; an NVIDIA GPU returns its canonical NaN (0x7fffffff) from add/sub/mul/div/sqrt.f32,
 * and its neg of a NaN is not a sign flip. The reference runs on x86, so the CUDA dialect of the
 * element-wise expressions fixes every NaN result up to x86's (x86nan.cuh). Compiled as plain C++
 * on x86, a kernel that lacks a fixup would still get x86's NaN and pass; here it does not:
 * `float` and `double` are classes whose every arithmetic operation, negation, float <-> double
 * conversion and libm call returns 0x7fffffff / 0x7fffffffffffffff whenever its result is a NaN
 * (for double the GPU may keep payloads; the canonical NaN is the stricter test). Numbers are
 * computed natively, with C's promotions (an integer operand converts to the floating type, float
 * with double computes in double), so every non-NaN result is the native one. Moves (loads,
 * stores, selects, memcpy bit casts) and comparisons are untouched.
 */
#ifndef GRADC_HOST_GPUNAN_H
#define GRADC_HOST_GPUNAN_H
#include <type_traits>

struct gc_w64;
struct gc_w32 {
    float v;
    gc_w32() = default;
    constexpr gc_w32(float x) : v(x) {}  /* a literal or a native float: moved as it is */
    constexpr gc_w32(double x) : v((float)x) {}  /* a literal: rounded at compile time */
    template <class T, typename std::enable_if<std::is_integral<T>::value, int>::type = 0>
    constexpr gc_w32(T x) : v((float)x) {}
    explicit gc_w32(const gc_w64 &x);
    template <class T, typename std::enable_if<std::is_integral<T>::value, int>::type = 0>
    explicit operator T() const { return (T)v; }
};
struct gc_w64 {
    double v;
    gc_w64() = default;
    constexpr gc_w64(double x) : v(x) {}
    constexpr gc_w64(float x) : v((double)x) {}
    template <class T, typename std::enable_if<std::is_integral<T>::value, int>::type = 0>
    constexpr gc_w64(T x) : v((double)x) {}
    gc_w64(const gc_w32 &x);
    template <class T, typename std::enable_if<std::is_integral<T>::value, int>::type = 0>
    explicit operator T() const { return (T)v; }
};
static_assert(sizeof(gc_w32) == 4 && sizeof(gc_w64) == 8, "gc_w32/gc_w64: padded");
static_assert(std::is_trivially_copyable<gc_w32>::value, "gc_w32: not a plain value");

static inline gc_w32 gc_gpu(gc_w32 r) {  /* the GPU's NaN for a NaN result */
    if (r.v != r.v) { const uint32_t c = 0x7fffffffu; memcpy(&r.v, &c, 4); }
    return r;
}
static inline gc_w64 gc_gpu(gc_w64 r) {
    if (r.v != r.v) { const uint64_t c = UINT64_C(0x7fffffffffffffff); memcpy(&r.v, &c, 8); }
    return r;
}
inline gc_w32::gc_w32(const gc_w64 &x) : v(gc_gpu(gc_w32((float)x.v)).v) {}
inline gc_w64::gc_w64(const gc_w32 &x) : v(gc_gpu(gc_w64((double)x.v)).v) {}

/* C's usual arithmetic conversions: rank 0 integer, 1 float, 2 double */
template <class T> struct gc_rank {
    static constexpr int value = std::is_integral<T>::value ? 0
        : std::is_same<T, float>::value ? 1 : std::is_same<T, double>::value ? 2 : -1;
};
template <> struct gc_rank<gc_w32> { static constexpr int value = 1; };
template <> struct gc_rank<gc_w64> { static constexpr int value = 2; };
template <class T> struct gc_wrapped : std::false_type {};
template <> struct gc_wrapped<gc_w32> : std::true_type {};
template <> struct gc_wrapped<gc_w64> : std::true_type {};
template <class A, class B> struct gc_mix {
    using a = typename std::decay<A>::type;
    using b = typename std::decay<B>::type;
    static constexpr bool ok = (gc_wrapped<a>::value || gc_wrapped<b>::value)
        && gc_rank<a>::value >= 0 && gc_rank<b>::value >= 0;
    using type = typename std::conditional<(gc_rank<a>::value == 2 || gc_rank<b>::value == 2),
                                           gc_w64, gc_w32>::type;
    using native = decltype(type::v);
};
template <class T> static inline T gc_raw(T x) { return x; }
static inline float gc_raw(gc_w32 x) { return x.v; }
static inline double gc_raw(gc_w64 x) { return x.v; }

#define GC_ARITH(OP)                                                                        \
    template <class A, class B, typename std::enable_if<gc_mix<A, B>::ok, int>::type = 0>  \
    static inline typename gc_mix<A, B>::type operator OP(A a, B b) {                       \
        using N = typename gc_mix<A, B>::native;                                            \
        return gc_gpu(typename gc_mix<A, B>::type((N)gc_raw(a) OP (N)gc_raw(b)));           \
    }                                                                                       \
    template <class B, typename std::enable_if<gc_mix<gc_w32, B>::ok, int>::type = 0>      \
    static inline gc_w32 &operator OP##=(gc_w32 &a, B b) { a = gc_w32(a OP b); return a; } \
    template <class B, typename std::enable_if<gc_mix<gc_w64, B>::ok, int>::type = 0>      \
    static inline gc_w64 &operator OP##=(gc_w64 &a, B b) { a = gc_w64(a OP b); return a; }
GC_ARITH(+)
GC_ARITH(-)
GC_ARITH(*)
GC_ARITH(/)
#undef GC_ARITH

#define GC_COMPARE(OP)                                                                      \
    template <class A, class B, typename std::enable_if<gc_mix<A, B>::ok, int>::type = 0>  \
    static inline bool operator OP(A a, B b) {                                              \
        using N = typename gc_mix<A, B>::native;                                            \
        return (N)gc_raw(a) OP (N)gc_raw(b);                                                \
    }
GC_COMPARE(<)
GC_COMPARE(>)
GC_COMPARE(<=)
GC_COMPARE(>=)
GC_COMPARE(==)
GC_COMPARE(!=)
#undef GC_COMPARE

static inline gc_w32 operator-(gc_w32 a) { return gc_gpu(gc_w32(-a.v)); }
static inline gc_w64 operator-(gc_w64 a) { return gc_gpu(gc_w64(-a.v)); }
static inline gc_w32 operator+(gc_w32 a) { return a; }
static inline gc_w64 operator+(gc_w64 a) { return a; }

/* libm: the native function, NaN results canonical (the GPU's device functions) */
#define GC_LIBM1(NAME)                                                                      \
    static inline gc_w64 NAME(gc_w64 x) { return gc_gpu(gc_w64(::NAME(x.v))); }          \
    static inline gc_w32 NAME(gc_w32 x) { return gc_gpu(gc_w32(::NAME(x.v))); }
GC_LIBM1(sqrt) GC_LIBM1(exp) GC_LIBM1(log) GC_LIBM1(tanh) GC_LIBM1(erf) GC_LIBM1(erfc)
GC_LIBM1(sin) GC_LIBM1(cos) GC_LIBM1(fabs) GC_LIBM1(floor) GC_LIBM1(ceil) GC_LIBM1(trunc)
GC_LIBM1(rint) GC_LIBM1(round) GC_LIBM1(nearbyint) GC_LIBM1(expm1) GC_LIBM1(log1p)
#undef GC_LIBM1
#define GC_LIBMF(NAME, F)                                                                   \
    static inline gc_w32 NAME(gc_w32 x) { return gc_gpu(gc_w32(::F(x.v))); }
GC_LIBMF(sqrtf, sqrtf) GC_LIBMF(expf, expf) GC_LIBMF(logf, logf) GC_LIBMF(fabsf, fabsf)
GC_LIBMF(floorf, floorf) GC_LIBMF(ceilf, ceilf) GC_LIBMF(truncf, truncf) GC_LIBMF(tanhf, tanhf)
GC_LIBMF(roundf, roundf) GC_LIBMF(rintf, rintf) GC_LIBMF(nearbyintf, nearbyintf)
#undef GC_LIBMF
static inline gc_w64 pow(gc_w64 x, gc_w64 y) { return gc_gpu(gc_w64(::pow(x.v, y.v))); }
static inline gc_w64 pow(gc_w64 x, double y) { return gc_gpu(gc_w64(::pow(x.v, y))); }
static inline gc_w64 pow(double x, gc_w64 y) { return gc_gpu(gc_w64(::pow(x, y.v))); }
static inline gc_w64 fma(gc_w64 x, gc_w64 y, gc_w64 z) {
    return gc_gpu(gc_w64(::fma(x.v, y.v, z.v)));
}
static inline gc_w32 fmaf(gc_w32 x, gc_w32 y, gc_w32 z) {
    return gc_gpu(gc_w32(::fmaf(x.v, y.v, z.v)));
}
static inline bool isnan(gc_w32 x) { return x.v != x.v; }
static inline bool isnan(gc_w64 x) { return x.v != x.v; }

#define float gc_w32
#define double gc_w64
#endif  /* GRADC_HOST_GPUNAN_H */
