/* gradc host harness: the generated CUDA kernels compiled as C++ by the system compiler, so CI
 * runs them without a GPU (backends/cuda/host.py). Included before the generated source.
 *
 * A launch runs every block in turn. Kernels without __syncthreads run each thread to the end,
 * one after another (a plain loop over threadIdx). Kernels with __syncthreads run each thread
 * of a block as a fiber (on x86-64 a switch of stack pointers and callee-saved registers,
 * elsewhere ucontext): __syncthreads switches back to the scheduler, which resumes
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
static int *gc_done;
static void (*gc_fn)(char *);
static char *gc_arg;
enum { GC_FIBER_STACK = 1 << 16 };

#if defined(__x86_64__) && !defined(GC_HOST_UCONTEXT)
/* A fiber switch of its own: the System V ABI's callee-saved registers and the stack pointer
 * (ucontext's swapcontext also saves the signal mask: a system call per switch, which made
 * barrier kernels 30x slower). gc_fiber_switch(&save, to) stores this context's stack pointer in
 * save and resumes the one saved in to. */
__asm__(".text\n.globl gc_fiber_switch\n.hidden gc_fiber_switch\n"
        ".type gc_fiber_switch,@function\ngc_fiber_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n.size gc_fiber_switch, .-gc_fiber_switch\n");
extern "C" __attribute__((visibility("hidden"))) void gc_fiber_switch(void **save, void *to);
static void *gc_sched_sp;
static void **gc_fiber_sp;         /* the saved stack pointer of each fiber */

static inline void __syncthreads(void) {
  if (gc_in_fibers) gc_fiber_switch(&gc_fiber_sp[gc_fiber], gc_sched_sp);
}

static void gc_fiber_start(void) {  /* entered by the first switch's ret; never returns */
  gc_fn(gc_arg);
  gc_done[gc_fiber] = 1;
  gc_fiber_switch(&gc_fiber_sp[gc_fiber], gc_sched_sp);
}

/* A fresh fiber on the stack [base, base + GC_FIBER_STACK): the first switch pops six zero
 * registers and returns into gc_fiber_start with the stack aligned as after a call. */
static void gc_fiber_make(int t, char *base) {
  uintptr_t top = ((uintptr_t)base + GC_FIBER_STACK) & ~(uintptr_t)15;
  void **sp = (void **)top;
  *--sp = 0;                         /* the return address gc_fiber_start never uses */
  *--sp = (void *)gc_fiber_start;
  for (int r = 0; r < 6; r++) *--sp = 0;
  gc_fiber_sp[t] = sp;
}

static int gc_fibers_alloc(unsigned int nt) {
  gc_fiber_sp = (void **)malloc(nt * sizeof(void *));
  return gc_fiber_sp == NULL;
}
static void gc_fibers_free(void) { free(gc_fiber_sp); gc_fiber_sp = NULL; }
static int gc_fiber_resume(int t) { gc_fiber_switch(&gc_sched_sp, gc_fiber_sp[t]); return 0; }
#else
static ucontext_t gc_scheduler;
static ucontext_t *gc_fibers;      /* one context per thread of the block */

static inline void __syncthreads(void) {
  if (gc_in_fibers) swapcontext(&gc_fibers[gc_fiber], &gc_scheduler);
}

static void gc_fiber_main(void) {
  gc_fn(gc_arg);
  gc_done[gc_fiber] = 1;  /* returning resumes the scheduler (uc_link) */
}

static int gc_fiber_make_uc(int t, char *base) {
  if (getcontext(&gc_fibers[t]) != 0) return 1;
  gc_fibers[t].uc_stack.ss_sp = base;
  gc_fibers[t].uc_stack.ss_size = GC_FIBER_STACK;
  gc_fibers[t].uc_link = &gc_scheduler;
  makecontext(&gc_fibers[t], gc_fiber_main, 0);
  return 0;
}
#define gc_fiber_make(t, base) do { if (gc_fiber_make_uc((t), (base))) return 1; } while (0)
static int gc_fibers_alloc(unsigned int nt) {
  gc_fibers = (ucontext_t *)malloc(nt * sizeof(ucontext_t));
  return gc_fibers == NULL;
}
static void gc_fibers_free(void) { free(gc_fibers); gc_fibers = NULL; }
static int gc_fiber_resume(int t) { return swapcontext(&gc_scheduler, &gc_fibers[t]) != 0; }
#endif

static void gc_thread_index(unsigned int t) {
  threadIdx.x = t % blockDim.x;
  threadIdx.y = t / blockDim.x % blockDim.y;
  threadIdx.z = t / (blockDim.x * blockDim.y);
}

/* One block of a barrier kernel: its threads as fibers, resumed round robin. */
static int gc_block_fibers(unsigned int nt, char *stacks) {
  for (unsigned int t = 0; t < nt; t++) {
    gc_fiber_make((int)t, stacks + (size_t)t * GC_FIBER_STACK);
    gc_done[t] = 0;
  }
  unsigned int left = nt;
  while (left) {
    for (unsigned int t = 0; t < nt; t++) {
      if (gc_done[t]) continue;
      gc_fiber = (int)t;
      gc_thread_index(t);
      if (gc_fiber_resume((int)t)) return 1;
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
    gc_done = (int *)malloc(nt * sizeof(int));
    if (!stacks || !gc_done || gc_fibers_alloc(nt)) {
      free(stacks); free(gc_done); gc_fibers_free(); return 1;
    }
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
  if (fibers) { free(stacks); free(gc_done); gc_fibers_free(); }
  return rc;
}
#endif  /* GRADC_HOST_H */
