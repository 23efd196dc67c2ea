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

/* This thread's first element and the grid's stride: every kernel is a grid-stride loop. */
GC_INLINE int64_t gc_first(void) { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
GC_INLINE int64_t gc_stride(void) { return (int64_t)gridDim.x * blockDim.x; }
