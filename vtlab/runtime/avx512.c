/* SPLADE's masked max of the MLM logits fused with their GEMM on AVX-512 (vtlab/runtime/fused.py): fp32 with FMA
 * (any AVX-512 CPU), bf16 with AVX512_BF16's vdpbf16ps and int8 with AVX512_VNNI's vpdpbusd where AMX is absent
 * (AMD Zen 4/5, Intel Cooper Lake).
 *
 * Built on first use by vtlab/runtime/native.py (cc -O3 -mavx512f -mavx512bw -mavx512bf16 -mavx512vnni ...) and called
 * through ctypes; each function only on CPUs whose /proc/cpuinfo lists what it uses (fused.py). Why: as on AMX
 * (amx.c), the logits GEMM of a small hidden size is bound by writing its [tokens, vocabulary] output and reading it
 * back for the max; here a tile of T tokens × NB blocks of 16 columns is accumulated in registers and max-reduced from them.
 *
 * The weights are packed (vtlab.runtime.fused.pack) so that in a block of 16 columns the 64 bytes of k-unit u (one
 * fp32, a pair of bf16 or a quad of int8 values per column) sit at u * 64 — one zmm, which the dot instruction
 * multiplies with the token's k-unit (4 bytes) broadcast to all 16 lanes (for bf16 and int8 this is AMX's layout).
 *
 * x, text_of, tokens, w, best, ldb, group_tokens, sx, zp, rowsum: as in amx.c (x readable for T rows past the end).
 * Arithmetic: fp32 FMAs, bf16 products with fp32 accumulation, or exact int32 dot products; the max is exact.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

enum { BF16, INT8, F32 }; /* the operands' type: a k-unit is a pair of bf16, a quad of int8 or one fp32 value */
#define T 8                 /* tokens per register tile */
#define NB 3              /* column blocks of 16 per register tile: T × NB accumulators + NB weight vectors fit in 32 zmm */

static inline uint32_t unit_at(const uint8_t *p) {
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return u;
}

static inline __attribute__((always_inline)) __m512i dot(int kind, __m512i acc, __m512i a, __m512i b) {
    if (kind == INT8) return _mm512_dpbusd_epi32(acc, a, b);
    if (kind == F32)
        return _mm512_castps_si512(
            _mm512_fmadd_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(b), _mm512_castsi512_ps(acc)));
    return _mm512_castps_si512(_mm512_dpbf16_ps(_mm512_castsi512_ps(acc), (__m512bh)a, (__m512bh)b));
}

/* the max over each run of one text's rows of acc (rows tokens from t0), into that text's row of best */
static inline __attribute__((always_inline)) void reduce(int kind, int nb, const __m512i acc[T][NB],
                                                         const int64_t *text_of, int64_t t0, int rows, int64_t cb,
                                                         float *best, int64_t ldb, const float *sx, const float *zp,
                                                         const float *rowsum) {
    for (int r0 = 0; r0 < rows;) {
        int64_t text = text_of[t0 + r0];
        __m512 m[NB];
        __mmask16 nan[NB]; /* lanes that saw a NaN: vmaxps drops a NaN in its first operand, torch's max keeps it */
        for (int j = 0; j < nb; j++) m[j] = _mm512_set1_ps(-__builtin_inff()), nan[j] = 0;
        int r = r0;
        for (; r < rows && text_of[t0 + r] == text; r++) {
            for (int j = 0; j < nb; j++) {
                __m512 c;
                if (kind == INT8) {
                    c = _mm512_cvtepi32_ps(acc[r][j]);
                    c = _mm512_fnmadd_ps(_mm512_set1_ps(zp[t0 + r]), _mm512_loadu_ps(rowsum + (cb + j) * 16), c);
                    c = _mm512_mul_ps(c, _mm512_set1_ps(sx[t0 + r]));
                } else {
                    c = _mm512_castsi512_ps(acc[r][j]);
                }
                nan[j] |= _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q);
                m[j] = _mm512_max_ps(m[j], c);
            }
        }
        float *dst = best + text * ldb + cb * 16;
        for (int j = 0; j < nb; j++) {
            __m512 d = _mm512_max_ps(m[j], _mm512_loadu_ps(dst + 16 * j)); /* keeps a NaN already in best */
            _mm512_storeu_ps(dst + 16 * j, _mm512_mask_mov_ps(d, nan[j], _mm512_set1_ps(__builtin_nanf(""))));
        }
        r0 = r;
    }
}

/* k-unit u of token row r broadcast to 16 lanes */
#define BCAST(r) _mm512_set1_epi32((int)unit_at(xt + (r) * row_bytes + u * 4))
/* the 3 accumulators of token row r += its k-unit · the 3 weight vectors */
#define ROW3(r)                                  \
    do {                                         \
        __m512i a = BCAST(r);                    \
        c##r##0 = dot(kind, c##r##0, a, b0);     \
        c##r##1 = dot(kind, c##r##1, a, b1);     \
        c##r##2 = dot(kind, c##r##2, a, b2);     \
    } while (0)
#define ZERO3(r) __m512i c##r##0 = _mm512_setzero_si512(), c##r##1 = c##r##0, c##r##2 = c##r##0
#define SAVE3(r) (acc[r][0] = c##r##0, acc[r][1] = c##r##1, acc[r][2] = c##r##2)

/* One register tile of T tokens [t0, t0 + T) × NB full column blocks from cb: 24 named accumulators (an array of
 * vectors indexed in loops is kept in memory by gcc), stored once for the reduction. */
static inline __attribute__((always_inline)) void tile3(int kind, const uint8_t *x, int64_t row_bytes,
                                                        const int64_t *text_of, int64_t t0, int rows,
                                                        const uint8_t *w, int64_t block, int64_t cb, float *best,
                                                        int64_t ldb, const float *sx, const float *zp,
                                                        const float *rowsum) {
    ZERO3(0);
    ZERO3(1);
    ZERO3(2);
    ZERO3(3);
    ZERO3(4);
    ZERO3(5);
    ZERO3(6);
    ZERO3(7);
    const int64_t units = row_bytes / 4;
    const uint8_t *xt = x + t0 * row_bytes, *wb = w + cb * block;
    for (int64_t u = 0; u < units; u++) {
        __m512i b0 = _mm512_loadu_si512((const void *)(wb + u * 64));
        __m512i b1 = _mm512_loadu_si512((const void *)(wb + block + u * 64));
        __m512i b2 = _mm512_loadu_si512((const void *)(wb + 2 * block + u * 64));
        ROW3(0);
        ROW3(1);
        ROW3(2);
        ROW3(3);
        ROW3(4);
        ROW3(5);
        ROW3(6);
        ROW3(7);
    }
    __m512i acc[T][NB] __attribute__((aligned(64)));
    SAVE3(0);
    SAVE3(1);
    SAVE3(2);
    SAVE3(3);
    SAVE3(4);
    SAVE3(5);
    SAVE3(6);
    SAVE3(7);
    reduce(kind, NB, (const __m512i(*)[NB])acc, text_of, t0, rows, cb, best, ldb, sx, zp, rowsum);
}

/* The same for the last nb < NB blocks of a thread's columns (rare: no register blocking needed). */
static inline __attribute__((always_inline)) void tile_tail(int kind, int nb, const uint8_t *x, int64_t row_bytes,
                                                            const int64_t *text_of, int64_t t0, int rows,
                                                            const uint8_t *w, int64_t block, int64_t cb,
                                                            float *best, int64_t ldb, const float *sx,
                                                            const float *zp, const float *rowsum) {
    __m512i acc[T][NB] __attribute__((aligned(64)));
    const int64_t units = row_bytes / 4;
    for (int r = 0; r < T; r++)
        for (int j = 0; j < nb; j++) {
            __m512i c = _mm512_setzero_si512();
            for (int64_t u = 0; u < units; u++) {
                __m512i a = _mm512_set1_epi32((int)unit_at(x + (t0 + r) * row_bytes + u * 4));
                c = dot(kind, c, a, _mm512_loadu_si512((const void *)(w + (cb + j) * block + u * 64)));
            }
            acc[r][j] = c;
        }
    reduce(kind, nb, (const __m512i(*)[NB])acc, text_of, t0, rows, cb, best, ldb, sx, zp, rowsum);
}

/* For each group of tokens that stays in L2, each pass of NB column blocks (their weights stay in L1), each tile of
 * T tokens. */
static inline __attribute__((always_inline)) void avx512_max(int kind, const uint8_t *x, int64_t row_bytes,
                                                             const int64_t *text_of, int64_t tokens,
                                                             const uint8_t *w, int64_t cb0, int64_t cb1, float *best,
                                                             int64_t ldb, int64_t group_tokens, const float *sx,
                                                             const float *zp, const float *rowsum) {
    const int64_t block = (row_bytes / 4) * 64;
    for (int64_t g0 = 0; g0 < tokens; g0 += group_tokens) {
        int64_t g1 = g0 + group_tokens < tokens ? g0 + group_tokens : tokens;
        for (int64_t cb = cb0; cb < cb1; cb += NB) {
            int64_t nb = cb1 - cb < NB ? cb1 - cb : NB;
            for (int64_t t0 = g0; t0 < g1; t0 += T) {
                int rows = t0 + T <= g1 ? T : (int)(g1 - t0);
                if (nb == NB)
                    tile3(kind, x, row_bytes, text_of, t0, rows, w, block, cb, best, ldb, sx, zp, rowsum);
                else
                    tile_tail(kind, (int)nb, x, row_bytes, text_of, t0, rows, w, block, cb, best, ldb, sx, zp, rowsum);
            }
        }
    }
}

void vt_fused_max_f32(const float *x, const int64_t *text_of, int64_t tokens, int64_t H, const float *w, int64_t cb0,
                      int64_t cb1, float *best, int64_t ldb, int64_t group_tokens) {
    avx512_max(F32, (const uint8_t *)x, H * 4, text_of, tokens, (const uint8_t *)w, cb0, cb1, best, ldb, group_tokens,
               NULL, NULL, NULL);
}

void vt_fused_max_bf16(const uint16_t *x, const int64_t *text_of, int64_t tokens, int64_t H, const uint16_t *w,
                       int64_t cb0, int64_t cb1, float *best, int64_t ldb, int64_t group_tokens) {
    avx512_max(BF16, (const uint8_t *)x, H * 2, text_of, tokens, (const uint8_t *)w, cb0, cb1, best, ldb, group_tokens,
               NULL, NULL, NULL);
}

void vt_fused_max_int8(const uint8_t *x, const float *sx, const float *zp, const int64_t *text_of, int64_t tokens,
                       int64_t H, const int8_t *w, const float *rowsum, int64_t cb0, int64_t cb1, float *best,
                       int64_t ldb, int64_t group_tokens) {
    avx512_max(INT8, x, H, text_of, tokens, (const uint8_t *)w, cb0, cb1, best, ldb, group_tokens, sx, zp, rowsum);
}
