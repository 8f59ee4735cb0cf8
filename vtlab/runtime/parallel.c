/* The fused pooling kernels' column split (vtlab/runtime/fused.py) in one OpenMP region: each thread of the team runs
 * the kernel function `f` on its share of the column blocks [blocks · t / n, blocks · (t + 1) / n).
 *
 * Built with -fopenmp, so the library needs libgomp.so.1, and fused.py loads it only where torch's own GNU OpenMP
 * runtime is that library: the dynamic loader then binds it to torch's copy, and the team is torch's intra-op
 * threads — the threads that just ran the encoder's ops and still spin waiting for the next region. Helper threads
 * of vtlab's own would share cores with them until they stop spinning (fused.py: measured cost).
 *
 * f32: vt_fused_max_f32 or vt_fused_max_bf16 of a kernel library (the same arguments); int8: vt_fused_max_int8. */
#include <omp.h>
#include <stdint.h>

typedef void (*f32_fn)(const void *x, const int64_t *text_of, int64_t tokens, int64_t H, const void *w, int64_t cb0,
                       int64_t cb1, float *best, int64_t ldb, int64_t group_tokens);
typedef void (*int8_fn)(const void *x, const float *sx, const float *zp, const int64_t *text_of, int64_t tokens,
                        int64_t H, const void *w, const float *rowsum, int64_t cb0, int64_t cb1, float *best,
                        int64_t ldb, int64_t group_tokens);

void vt_parallel_f32(f32_fn f, int threads, int64_t blocks, const void *x, const int64_t *text_of, int64_t tokens,
                     int64_t H, const void *w, float *best, int64_t ldb, int64_t group_tokens) {
#pragma omp parallel num_threads(threads)
    {
        int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
        f(x, text_of, tokens, H, w, blocks * t / n, blocks * (t + 1) / n, best, ldb, group_tokens);
    }
}

void vt_parallel_int8(int8_fn f, int threads, int64_t blocks, const void *x, const float *sx, const float *zp,
                      const int64_t *text_of, int64_t tokens, int64_t H, const void *w, const float *rowsum, float *best,
                      int64_t ldb, int64_t group_tokens) {
#pragma omp parallel num_threads(threads)
    {
        int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
        f(x, sx, zp, text_of, tokens, H, w, rowsum, blocks * t / n, blocks * (t + 1) / n, best, ldb, group_tokens);
    }
}
