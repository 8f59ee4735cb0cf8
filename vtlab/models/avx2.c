/* SPLADE's masked max of the fp32 MLM logits fused with their GEMM on AVX2 + FMA (vtlab/models/fused.py), for CPUs
 * without AVX-512 (AMD Zen 2/3, Intel before Skylake-X). The same scheme as avx512.c with 16 ymm registers: a tile of
 * T tokens × NB blocks of 8 columns is accumulated in registers and max-reduced from them, so the [tokens,
 * vocabulary] logits are never written out and read back.
 *
 * Built on first use by vtlab/native.py (cc -O3 -mavx2 -mfma ...) and called through ctypes, only on CPUs whose
 * /proc/cpuinfo lists avx2 and fma.
 *
 * x:    [tokens, H] fp32, the real (non-pad) tokens of all texts back to back, readable for T rows past the end;
 *       text_of[t]: the text of token t.
 * w:    the decoder weight packed as [V/8 column blocks][H][8 columns] (vtlab.models.fused.pack with 8 lanes).
 * best: [texts, ldb] fp32, filled with -inf by the caller; best[b, v] = max over the tokens of text b of x[t] . w[v]
 *       (no bias) for the column blocks [cb0, cb1).
 */
#include <immintrin.h>
#include <stdint.h>

#define T 6  /* tokens per register tile */
#define NB 2 /* column blocks of 8: T × NB accumulators + NB weight vectors + 1 broadcast fit in 16 ymm */

/* the max over each run of one text's rows of acc (rows tokens from t0), into that text's row of best */
static inline __attribute__((always_inline)) void reduce(int nb, const __m256 acc[T][NB], const int64_t *text_of,
                                                         int64_t t0, int rows, int64_t cb, float *best, int64_t ldb) {
    for (int r0 = 0; r0 < rows;) {
        int64_t text = text_of[t0 + r0];
        __m256 m[NB], nan[NB]; /* nan: lanes that saw a NaN (vmaxps drops a NaN in its first operand; torch keeps it) */
        for (int j = 0; j < nb; j++) m[j] = _mm256_set1_ps(-__builtin_inff()), nan[j] = _mm256_setzero_ps();
        int r = r0;
        for (; r < rows && text_of[t0 + r] == text; r++)
            for (int j = 0; j < nb; j++) {
                nan[j] = _mm256_or_ps(nan[j], _mm256_cmp_ps(acc[r][j], acc[r][j], _CMP_UNORD_Q));
                m[j] = _mm256_max_ps(m[j], acc[r][j]);
            }
        float *dst = best + text * ldb + cb * 8;
        for (int j = 0; j < nb; j++) {
            __m256 d = _mm256_max_ps(m[j], _mm256_loadu_ps(dst + 8 * j)); /* keeps a NaN already in best */
            _mm256_storeu_ps(dst + 8 * j, _mm256_blendv_ps(d, _mm256_set1_ps(__builtin_nanf("")), nan[j]));
        }
        r0 = r;
    }
}

#define ROW2(r)                                   \
    do {                                          \
        __m256 a = _mm256_broadcast_ss(xt + (r) * H + k); \
        c##r##0 = _mm256_fmadd_ps(a, b0, c##r##0); \
        c##r##1 = _mm256_fmadd_ps(a, b1, c##r##1); \
    } while (0)
#define ZERO2(r) __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = c##r##0
#define SAVE2(r) (acc[r][0] = c##r##0, acc[r][1] = c##r##1)

/* One register tile of T tokens from t0 × NB full column blocks from cb (named accumulators: gcc keeps an array of
 * vectors indexed in loops in memory). */
static void tile2(const float *x, int64_t H, const int64_t *text_of, int64_t t0, int rows, const float *w,
                  int64_t cb, float *best, int64_t ldb) {
    ZERO2(0);
    ZERO2(1);
    ZERO2(2);
    ZERO2(3);
    ZERO2(4);
    ZERO2(5);
    const float *xt = x + t0 * H, *wb = w + cb * H * 8;
    for (int64_t k = 0; k < H; k++) {
        __m256 b0 = _mm256_loadu_ps(wb + k * 8), b1 = _mm256_loadu_ps(wb + H * 8 + k * 8);
        ROW2(0);
        ROW2(1);
        ROW2(2);
        ROW2(3);
        ROW2(4);
        ROW2(5);
    }
    __m256 acc[T][NB] __attribute__((aligned(32)));
    SAVE2(0);
    SAVE2(1);
    SAVE2(2);
    SAVE2(3);
    SAVE2(4);
    SAVE2(5);
    reduce(NB, (const __m256(*)[NB])acc, text_of, t0, rows, cb, best, ldb);
}

/* The last single block of a thread's columns. */
static void tile_tail(const float *x, int64_t H, const int64_t *text_of, int64_t t0, int rows, const float *w,
                      int64_t cb, float *best, int64_t ldb) {
    __m256 acc[T][NB] __attribute__((aligned(32)));
    for (int r = 0; r < T; r++) {
        __m256 c = _mm256_setzero_ps();
        for (int64_t k = 0; k < H; k++)
            c = _mm256_fmadd_ps(_mm256_broadcast_ss(x + (t0 + r) * H + k), _mm256_loadu_ps(w + cb * H * 8 + k * 8), c);
        acc[r][0] = c;
    }
    reduce(1, (const __m256(*)[NB])acc, text_of, t0, rows, cb, best, ldb);
}

void vt_fused_max_f32(const float *x, const int64_t *text_of, int64_t tokens, int64_t H, const float *w, int64_t cb0,
                      int64_t cb1, float *best, int64_t ldb, int64_t group_tokens) {
    for (int64_t g0 = 0; g0 < tokens; g0 += group_tokens) {
        int64_t g1 = g0 + group_tokens < tokens ? g0 + group_tokens : tokens;
        for (int64_t cb = cb0; cb < cb1; cb += NB)
            for (int64_t t0 = g0; t0 < g1; t0 += T) {
                int rows = t0 + T <= g1 ? T : (int)(g1 - t0);
                if (cb1 - cb >= NB)
                    tile2(x, H, text_of, t0, rows, w, cb, best, ldb);
                else
                    tile_tail(x, H, text_of, t0, rows, w, cb, best, ldb);
            }
    }
}
