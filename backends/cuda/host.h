/* gradc host harness: the generated CUDA kernels compiled as C++ by the system compiler, so CI
 * runs them without a GPU (backends/cuda/host.py). Included before the generated source.
 *
 * A launch runs every block in turn. Kernels without __syncthreads run each thread to the end,
 * one after another (a plain loop over threadIdx). Kernels with __syncthreads run each thread
 * of a block as a fiber (ucontext): __syncthreads switches back to the scheduler, which resumes
 * the block's threads round robin, so no thread passes the k-th barrier before every thread of
 * its block has reached it -- CUDA's barrier semantics, on one OS thread. __shared__ variables
 * are static: one copy, shared by the threads of the block running (blocks never overlap).
 * Not emulated: warp intrinsics, atomics, dynamic shared memory (gradc's kernels use none).
 */
#ifndef GRADC_HOST_H
#define GRADC_HOST_H
#define GC_HOST 1
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <ucontext.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static

struct gc_dim3 { unsigned int x, y, z; };
static gc_dim3 threadIdx, blockIdx, blockDim, gridDim;

static int gc_in_fibers;           /* a barrier kernel is running as fibers */
static int gc_fiber;               /* the fiber (thread of the block) running */
static ucontext_t gc_scheduler;
static ucontext_t *gc_fibers;      /* one context per thread of the block */
static int *gc_done;
static void (*gc_fn)(char *);
static char *gc_arg;

static inline void __syncthreads(void) {
  if (gc_in_fibers) swapcontext(&gc_fibers[gc_fiber], &gc_scheduler);
}

static void gc_fiber_main(void) {
  gc_fn(gc_arg);
  gc_done[gc_fiber] = 1;  /* returning resumes the scheduler (uc_link) */
}

enum { GC_FIBER_STACK = 1 << 16 };

static void gc_thread_index(unsigned int t) {
  threadIdx.x = t % blockDim.x;
  threadIdx.y = t / blockDim.x % blockDim.y;
  threadIdx.z = t / (blockDim.x * blockDim.y);
}

/* One block of a barrier kernel: its threads as fibers, resumed round robin. */
static int gc_block_fibers(unsigned int nt, char *stacks) {
  for (unsigned int t = 0; t < nt; t++) {
    if (getcontext(&gc_fibers[t]) != 0) return 1;
    gc_fibers[t].uc_stack.ss_sp = stacks + (size_t)t * GC_FIBER_STACK;
    gc_fibers[t].uc_stack.ss_size = GC_FIBER_STACK;
    gc_fibers[t].uc_link = &gc_scheduler;
    makecontext(&gc_fibers[t], gc_fiber_main, 0);
    gc_done[t] = 0;
  }
  unsigned int left = nt;
  while (left) {
    for (unsigned int t = 0; t < nt; t++) {
      if (gc_done[t]) continue;
      gc_fiber = (int)t;
      gc_thread_index(t);
      if (swapcontext(&gc_scheduler, &gc_fibers[t]) != 0) return 1;
      if (gc_done[t]) left--;
    }
  }
  return 0;
}

/* Run kernel ``fn`` over a grid; ``fibers``: the kernel uses __syncthreads. 0, or 1 when the
 * fibers' memory could not be allocated. */
static int gc_launch(void (*fn)(char *), unsigned int gx, unsigned int gy, unsigned int gz,
                     unsigned int bx, unsigned int by, unsigned int bz, int fibers, char *arena) {
  gridDim = {gx, gy, gz};
  blockDim = {bx, by, bz};
  const unsigned int nt = bx * by * bz;
  char *stacks = NULL;
  if (fibers) {
    stacks = (char *)malloc((size_t)nt * GC_FIBER_STACK);
    gc_fibers = (ucontext_t *)malloc(nt * sizeof(ucontext_t));
    gc_done = (int *)malloc(nt * sizeof(int));
    if (!stacks || !gc_fibers || !gc_done) { free(stacks); free(gc_fibers); free(gc_done); return 1; }
    gc_fn = fn;
    gc_arg = arena;
  }
  int rc = 0;
  for (unsigned int z = 0; z < gz && !rc; z++)
    for (unsigned int y = 0; y < gy && !rc; y++)
      for (unsigned int x = 0; x < gx && !rc; x++) {
        blockIdx = {x, y, z};
        if (fibers) {
          gc_in_fibers = 1;
          rc = gc_block_fibers(nt, stacks);
          gc_in_fibers = 0;
        } else {
          for (unsigned int t = 0; t < nt; t++) {
            gc_thread_index(t);
            fn(arena);
          }
        }
      }
  if (fibers) { free(stacks); free(gc_fibers); free(gc_done); }
  return rc;
}
#endif  /* GRADC_HOST_H */
