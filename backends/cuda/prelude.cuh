/* gradc CUDA prelude: the fixed text every generated CUDA program starts with (copied into it,
 * so a generated file compiles on its own, with NVRTC and no headers).
 *
 * Three dialects read this file:
 * - NVRTC (__CUDACC_RTC__): no headers at all, so the fixed-width integer types and the few
 *   macros the C target's expressions use (INT64_C, UINT64_C, INT32_MIN, INT64_MIN, NAN,
 *   INFINITY) are defined here;
 * - nvcc: the C headers;
 * - the host harness (GC_HOST, backends/cuda/host.h included first): the same kernels compiled
 *   as C++ by the host's C++ compiler for CI, blockIdx/threadIdx set by a loop over the grid.
 *
 * After it come the C target's numeric helpers (float16 conversions, float-to-integer casts,
 * integer wrap-around: prelude.h of the C target, copied verbatim) with GC_INLINE defined as
 * a device function: the element-wise expressions of both targets call the same helpers, so
 * they round and convert identically.
 */
#if defined(GC_HOST)
/* host harness: backends/cuda/host.h was included first */
#elif defined(__CUDACC_RTC__)
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
typedef unsigned long uintptr_t;  /* size_t is NVRTC's own */
#define INT64_C(c) c##LL
#define UINT64_C(c) c##ULL
#define INT32_MIN (-2147483647 - 1)
#define INT64_MIN (-INT64_C(9223372036854775807) - 1)
#define NAN __int_as_float(0x7fc00000)
#define INFINITY __int_as_float(0x7f800000)
#else
#include <stdint.h>
#include <string.h>
#include <math.h>
#endif

#define GC_INLINE __device__ __forceinline__  /* not static: an unused one is no warning */
#define GC_KERNEL extern "C" __global__ void __launch_bounds__(GC_BLOCK)
#define GC_BLOCK 256

/* Asynchronous copies of 4 or 8 bytes from global into shared memory (tiled.py's staging of
 * float32 and float64 products): cp.async on sm_80 and later, n = 0 filling the element with
 * zero bytes (+0); a plain copy elsewhere and on the host harness, where commit and wait have
 * nothing to wait for. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define GC_CP_ASYNC(bytes) \
    GC_INLINE void gc_cp_async##bytes(void *dst, const void *src, int n) { \
        unsigned s = (unsigned)__cvta_generic_to_shared(dst); \
        asm volatile("cp.async.ca.shared.global [%0], [%1], " #bytes ", %2;\n" \
                     :: "r"(s), "l"(src), "r"(n) : "memory"); \
    }
GC_CP_ASYNC(4)
GC_CP_ASYNC(8)
#define gc_cp_commit() asm volatile("cp.async.commit_group;\n" ::: "memory")
#define gc_cp_wait(n) asm volatile("cp.async.wait_group %0;\n" :: "n"(n) : "memory")
#else
#define GC_CP_ASYNC(bytes) \
    GC_INLINE void gc_cp_async##bytes(void *dst, const void *src, int n) { \
        if (n) memcpy(dst, src, bytes); else memset(dst, 0, bytes); \
    }
GC_CP_ASYNC(4)
GC_CP_ASYNC(8)
#define gc_cp_commit() ((void)0)
#define gc_cp_wait(n) ((void)0)
#endif

/* This thread's first element and the grid's stride: every kernel is a grid-stride loop. */
GC_INLINE int64_t gc_first(void) { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
GC_INLINE int64_t gc_stride(void) { return (int64_t)gridDim.x * blockDim.x; }
