/* STREAM-style triad a[i] = b[i] + s * c[i], the memory-bandwidth probe of bench_kernels.py.
 *
 * Built by the harness with the same compiler as gradc's C target ($CC, else cc) and
 * -O3 -fopenmp, loaded with ctypes. Bandwidth counts 3 arrays (STREAM's convention: the
 * write-allocate read of `a` is not counted).
 */
#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

int triad_has_openmp(void)
{
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

/* First touch with the threads that will run the triad, so pages land where they are used. */
void triad_fill(float *a, float *b, float *c, int64_t n, int threads)
{
    (void)threads;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; i++) {
        a[i] = 0.0f;
        b[i] = 1.0f;
        c[i] = 2.0f;
    }
}

void triad(float *restrict a, const float *restrict b, const float *restrict c, float s,
           int64_t n, int threads)
{
    (void)threads;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; i++)
        a[i] = b[i] + s * c[i];
}
