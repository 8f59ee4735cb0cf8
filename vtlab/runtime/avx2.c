/* SPLADE's masked max of the fp32 or int8 MLM logits fused with their GEMM on AVX2 + FMA (vtlab/runtime/fused.py),
 * for CPUs without AVX-512 (AMD Zen 2/3, Intel before Skylake-X). The same scheme as avx512.c with 16 ymm registers: a tile of
 * T tokens × NB blocks of 8 columns is accumulated in registers and max-reduced from them, so the [tokens,
 * vocabulary] logits are never written out and read back.
 *
 * Built on first use by vtlab/runtime/native.py (cc -O3 -mavx2 -mfma ...) and called through ctypes, only on CPUs whose
 * /proc/cpuinfo lists avx2 and fma.
 *
 * fp32 (int8: below)
 * x:    [tokens, H] fp32, the real (non-pad) tokens of all texts back to back, readable for T rows past the end;
 *       text_of[t]: the text of token t.
 * w:    the decoder weight packed as [V/8 column blocks][H][8 columns] (vtlab.runtime.fused.pack with 8 lanes).
 * best: [texts, ldb] fp32, filled with -inf by the caller; best[b, v] = max over the tokens of text b of x[t] . w[v]
 *       (no bias) for the column blocks [cb0, cb1).
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline uint32_t unit_at(const uint8_t *p) {
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return u;
}

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

/* For each group of tokens that stays in L2 (the caller's group_tokens), each pass of nb column blocks (their weights
 * stay in L1), each register tile of t tokens: FULL for a pass of nb blocks, TAIL for the single block left at the
 * end of [cb0, cb1). Both see t0 (first token), rows (tokens in the tile) and cb (first block). */
#define FOR_EACH_TILE(t, nb, FULL, TAIL)                                                    \
    for (int64_t g0 = 0; g0 < tokens; g0 += group_tokens) {                                \
        int64_t g1 = g0 + group_tokens < tokens ? g0 + group_tokens : tokens;              \
        for (int64_t cb = cb0; cb < cb1; cb += (nb))                                       \
            for (int64_t t0 = g0; t0 < g1; t0 += (t)) {                                    \
                int rows = t0 + (t) <= g1 ? (t) : (int)(g1 - t0);                          \
                if (cb1 - cb >= (nb))                                                      \
                    FULL;                                                                  \
                else                                                                       \
                    TAIL;                                                                  \
            }                                                                              \
    }

void vt_fused_max_f32(const float *x, const int64_t *text_of, int64_t tokens, int64_t H, const float *w, int64_t cb0,
                      int64_t cb1, float *best, int64_t ldb, int64_t group_tokens) {
    FOR_EACH_TILE(T, NB, tile2(x, H, text_of, t0, rows, w, cb, best, ldb),
                  tile_tail(x, H, text_of, t0, rows, w, cb, best, ldb))
}

/* ---------------------------------------------------------------------------------------------------------- int8 */
/* AVX2 has no int8 dot product: u8 × s8 pairs go through vpmaddubsw (two products summed into a saturating int16). The
 * activations use 6 bits (0..63; fused.py quantizes them so): the pair sums of two k-units then add in int16 (vpaddw)
 * without saturating or wrapping before one widening to int32, and the int32 sums are exact. (With 8-bit activations
 * a single pair can saturate; with 7 bits two cannot be added.) Two ways to widen, each the faster on some cores (the
 * results are the same bit for bit; fused.py times both once and keeps the faster):
 *   default: vpmaddwd against ones — a multiply, so three multiply-port instructions per 64 multiply-adds (fp32:
 *     eight FMAs). Fastest where two vector integer multiplies issue per cycle (Zen 3 and later, Skylake).
 *   -DVT_WIDEN_SHUFFLE: weights stored as u8 (w + 128: vpmaddubsw's unsigned operand, the 6-bit activations its signed
 *     one), so every product and pair sum is ≥ 0 and two pair sums ≤ 2 · 2 · 255 · 63 = 64,260 fit an unsigned int16.
 *     The int16 pairs are added into one int32 accumulator whole (lo + 65536 · hi) and, moved down by vpshufb, into a
 *     second (hi): lo + hi = whole − 65535 · hi, minus 128 · Σ activations for the offset. Two multiplies per 64 and
 *     no multiply to widen: faster on cores with one vector integer multiply port (Zen 2, Haswell).
 *
 * x: [tokens, H] uint8 (per-token asymmetric, sx scale and zp zero point), readable for T rows past the end; w: packed
 * [V/8][H/4][8][4] (fused.pack with 8 lanes: a k-unit of 4 bytes per column, 8 columns = one ymm); rowsum: each packed
 * column's sum of (signed) weights, for the zero point. logit = sx[t] · (Σ q·w − zp[t] · rowsum[v]). */
#define NBI 2 /* column blocks of 8 */
#ifdef VT_WIDEN_SHUFFLE
#define TI 2 /* tokens per int8 register tile: 2 × NBI × 2 accumulators */
#else
#define TI 4 /* 4 × NBI accumulators */
#endif

#if defined(VT_AVX_VNNI)
/* Built a second time with -DVT_AVX_VNNI -mavxvnni for CPUs with AVX-VNNI and no AVX-512 (Intel client CPUs since
 * Alder Lake; fused.py's "avx_vnni" kernel): vpdpbusd sums four u8×s8 products straight into int32, without int16
 * saturation, so activations keep 8 bits and each k-unit costs one instruction. */
typedef __m256i acc_t;
#define ACC_ZERO _mm256_setzero_si256()
static inline __attribute__((always_inline)) acc_t dot2(acc_t acc, __m256i a0, __m256i a1, const int8_t *b) {
    acc = _mm256_dpbusd_avx_epi32(acc, a0, _mm256_loadu_si256((const __m256i *)b));
    return _mm256_dpbusd_avx_epi32(acc, a1, _mm256_loadu_si256((const __m256i *)(b + 32)));
}
static inline __attribute__((always_inline)) __m256i sums(acc_t acc, int32_t offset) {
    (void)offset;
    return acc;
}
#elif defined(VT_WIDEN_SHUFFLE)
typedef struct {
    __m256i whole, hi;
} acc_t;
#define ACC_ZERO ((acc_t){_mm256_setzero_si256(), _mm256_setzero_si256()})
/* acc + Σ over two k-units of a·(w + 128): pair sums added in int16, widened by adds and one shuffle */
static inline __attribute__((always_inline)) acc_t dot2(acc_t acc, __m256i a0, __m256i a1, const int8_t *b) {
    const __m256i hi_down = _mm256_setr_epi8(2, 3, -1, -1, 6, 7, -1, -1, 10, 11, -1, -1, 14, 15, -1, -1, 2, 3, -1, -1,
                                             6, 7, -1, -1, 10, 11, -1, -1, 14, 15, -1, -1);
    __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_loadu_si256((const __m256i *)b), a0),
                                 _mm256_maddubs_epi16(_mm256_loadu_si256((const __m256i *)(b + 32)), a1));
    acc.whole = _mm256_add_epi32(acc.whole, p);
    acc.hi = _mm256_add_epi32(acc.hi, _mm256_shuffle_epi8(p, hi_down));
    return acc;
}
/* Σ q·w: lo + hi = whole − 65535 · hi (exact mod 2³², and the sum fits int32), less 128 · Σ q (offset) */
static inline __attribute__((always_inline)) __m256i sums(acc_t acc, int32_t offset) {
    __m256i lo_hi = _mm256_sub_epi32(acc.whole, _mm256_mullo_epi32(acc.hi, _mm256_set1_epi32(65535)));
    return _mm256_sub_epi32(lo_hi, _mm256_set1_epi32(offset));
}
#else
typedef __m256i acc_t;
#define ACC_ZERO _mm256_setzero_si256()
/* acc + Σ over two k-units of a·w: (a0·b0 + a1·b1) pairwise in int16, widened once */
static inline __attribute__((always_inline)) acc_t dot2(acc_t acc, __m256i a0, __m256i a1, const int8_t *b) {
    __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(a0, _mm256_loadu_si256((const __m256i *)b)),
                                 _mm256_maddubs_epi16(a1, _mm256_loadu_si256((const __m256i *)(b + 32))));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
static inline __attribute__((always_inline)) __m256i sums(acc_t acc, int32_t offset) {
    (void)offset;
    return acc;
}
#endif

/* the int32 sums of a tile dequantized to fp32 logits, then max-reduced like fp32's; off[t]: what the stored weights
 * add to token t's sums (WIDEN_SHUFFLE's 128 · Σ_k q[t, k]; NULL: nothing) */
static inline __attribute__((always_inline)) void reduce_int8(int nb, const acc_t acc[TI][NBI], const int32_t *off,
                                                              const int64_t *text_of, int64_t t0, int rows, int64_t cb,
                                                              float *best, int64_t ldb, const float *sx,
                                                              const float *zp, const float *rowsum) {
    __m256 f[T][NB] __attribute__((aligned(32)));
    for (int r = 0; r < TI; r++)
        for (int j = 0; j < nb; j++) {
            __m256 c = _mm256_cvtepi32_ps(sums(acc[r][j], off ? off[t0 + r] : 0));
            c = _mm256_fnmadd_ps(_mm256_set1_ps(zp[t0 + r]), _mm256_loadu_ps(rowsum + (cb + j) * 8), c);
            f[r][j] = _mm256_mul_ps(c, _mm256_set1_ps(sx[t0 + r]));
        }
    reduce(nb, (const __m256(*)[NB])f, text_of, t0, rows, cb, best, ldb);
}

#define BCASTI(r, k) _mm256_set1_epi32((int)unit_at(xt + (r) * H + (k) * 4))
#define ROWI(r)                                               \
    do {                                                      \
        __m256i a0 = BCASTI(r, u), a1 = BCASTI(r, u + 1);     \
        c##r##0 = dot2(c##r##0, a0, a1, wb + u * 32);         \
        c##r##1 = dot2(c##r##1, a0, a1, wb + block + u * 32); \
    } while (0)
#define ZEROI(r) acc_t c##r##0 = ACC_ZERO, c##r##1 = c##r##0
#define SAVEI(r) (acc[r][0] = c##r##0, acc[r][1] = c##r##1)

static void tile_int8(const uint8_t *x, int64_t H, const int64_t *text_of, int64_t t0, int rows, const int8_t *w,
                      int64_t cb, float *best, int64_t ldb, const float *sx, const float *zp, const float *rowsum,
                      const int32_t *off) {
    ZEROI(0);
    ZEROI(1);
#if TI == 4
    ZEROI(2);
    ZEROI(3);
#endif
    const int64_t units = H / 4, block = units * 32; /* units is even: H is a multiple of 64 */
    const uint8_t *xt = x + t0 * H;
    const int8_t *wb = w + cb * block;
    for (int64_t u = 0; u < units; u += 2) {
        ROWI(0);
        ROWI(1);
#if TI == 4
        ROWI(2);
        ROWI(3);
#endif
    }
    acc_t acc[TI][NBI] __attribute__((aligned(32)));
    SAVEI(0);
    SAVEI(1);
#if TI == 4
    SAVEI(2);
    SAVEI(3);
#endif
    reduce_int8(NBI, (const acc_t(*)[NBI])acc, off, text_of, t0, rows, cb, best, ldb, sx, zp, rowsum);
}

static void tile_int8_tail(const uint8_t *x, int64_t H, const int64_t *text_of, int64_t t0, int rows,
                           const int8_t *w, int64_t cb, float *best, int64_t ldb, const float *sx, const float *zp,
                           const float *rowsum, const int32_t *off) {
    const int64_t units = H / 4, block = units * 32;
    const uint8_t *xt = x + t0 * H;
    acc_t acc[TI][NBI] __attribute__((aligned(32)));
    for (int r = 0; r < TI; r++) {
        acc_t c = ACC_ZERO;
        for (int64_t u = 0; u < units; u += 2) c = dot2(c, BCASTI(r, u), BCASTI(r, u + 1), w + cb * block + u * 32);
        acc[r][0] = c;
    }
    reduce_int8(1, (const acc_t(*)[NBI])acc, off, text_of, t0, rows, cb, best, ldb, sx, zp, rowsum);
}

void vt_fused_max_int8(const uint8_t *x, const float *sx, const float *zp, const int64_t *text_of, int64_t tokens,
                       int64_t H, const int8_t *w, const float *rowsum, int64_t cb0, int64_t cb1, float *best,
                       int64_t ldb, int64_t group_tokens) {
    int32_t *off = NULL;
#ifdef VT_WIDEN_SHUFFLE
    /* for the rows a tile reads: the tokens and up to TI - 1 (≤ T) zero rows after them */
    off = malloc((size_t)(tokens + TI) * sizeof *off);
    if (!off) abort(); /* a few bytes per token: only when the process is out of memory anyway */
    for (int64_t t = 0; t < tokens + TI; t++) {
        int32_t s = 0;
        for (int64_t k = 0; k < H; k++) s += x[t * H + k];
        off[t] = 128 * s;
    }
#endif
    FOR_EACH_TILE(TI, NBI, tile_int8(x, H, text_of, t0, rows, w, cb, best, ldb, sx, zp, rowsum, off),
                  tile_int8_tail(x, H, text_of, t0, rows, w, cb, best, ldb, sx, zp, rowsum, off))
    free(off);
}
