/* SPLADE's masked max of the MLM logits, fused with their GEMM on Intel AMX (vtlab/runtime/fused.py): bf16 (the
 * pooling's bf16 path) and int8 (precision=int8, vtlab/runtime/quantize.py).
 *
 * Built on first use by vtlab/runtime/native.py (cc -O3 -mamx-tile -mamx-bf16 -mamx-int8 -mavx512f ...) and called through
 * ctypes, only on CPUs whose /proc/cpuinfo lists amx_bf16 and amx_int8 and after vt_amx_init() obtained the kernel's
 * permission to use AMX state. Why: for a small hidden size (SPLADE-tiny's 128) the logits GEMM is bound by writing
 * its [tokens, vocab] output and reading it back for the max, not by arithmetic; AMX computes a 16 × 16 tile of
 * logits in a few instructions, which is then max-reduced from L1 and never written out.
 *
 * x:     [tokens, H] bf16 (raw uint16), the real (non-pad) tokens of all texts back to back, row stride H, readable
 *        for 15 rows past the last token (the caller pads); text_of[t]: the text of token t.
 * w:     the decoder weight packed for AMX's B operand: [V/16 column blocks][H/32 k-steps][16 k-pairs][16 columns][2].
 * best:  [texts, ldb] fp32, filled with -inf by the caller; best[b, v0 + c] = max over the tokens of text b of
 *        x[t] . w[v0 + c] (no bias) for the column blocks [cb0, cb1).
 * Arithmetic: bf16 products, fp32 accumulation (as oneDNN's bf16 GEMM); the max is exact.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define NC 3 /* column blocks (of 16) per pass: C tiles 0..2, A tile 3, B tiles 4..6 */

typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg_t;

/* 0 when this process may use AMX tile data (asked once per process; Linux >= 5.16). */
int64_t vt_amx_init(void) { return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 ? 0 : -1; }

static void configure(void) {
    tilecfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int i = 0; i < 7; i++) {
        cfg.rows[i] = 16;
        cfg.colsb[i] = 64;
    }
    _tile_loadconfig(&cfg);
}

/* the max over a run of rows [r0, r1) of the stored bf16-product tiles into best's row of text b. No NaN is tracked
 * (vmaxps drops one in its first operand): that would add a compare per row to the reduction, the part of these
 * kernels that is not tile arithmetic; fused.py gives AMX only finite hidden states (FusedKernel.keeps_nan) */
static inline void reduce_run(const float scratch[NC][16][16], int r0, int r1, int nc, float *dst) {
    for (int j = 0; j < nc; j++) {
        __m512 m = _mm512_loadu_ps(scratch[j][r0]);
        for (int r = r0 + 1; r < r1; r++) m = _mm512_max_ps(m, _mm512_loadu_ps(scratch[j][r]));
        __m512 d = _mm512_loadu_ps(dst + 16 * j);
        _mm512_storeu_ps(dst + 16 * j, _mm512_max_ps(d, m));
    }
}

/* int8: the same over the dequantized int32 tiles, sx[r] · (C − zp[r] · rowsum) (see vt_fused_max_int8) */
static inline void reduce_run_int8(const int32_t scratch[NC][16][16], int r0, int r1, int nc, const float *sx,
                                   const float *zp, const float *rowsum, float *dst) {
    for (int j = 0; j < nc; j++) {
        __m512 rs = _mm512_loadu_ps(rowsum + 16 * j), m = _mm512_set1_ps(-INFINITY);
        for (int r = r0; r < r1; r++) {
            __m512 c = _mm512_cvtepi32_ps(_mm512_loadu_si512(scratch[j][r]));
            c = _mm512_fnmadd_ps(_mm512_set1_ps(zp[r]), rs, c);
            m = _mm512_max_ps(m, _mm512_mul_ps(c, _mm512_set1_ps(sx[r])));
        }
        __m512 d = _mm512_loadu_ps(dst + 16 * j);
        _mm512_storeu_ps(dst + 16 * j, _mm512_max_ps(d, m));
    }
}

/* The two reductions alone (AVX-512 only, no tile instruction), so that CPUs without AMX test them: scratch is
 * [nc][16][16] fp32 (int8 = 0) or int32 (int8 = 1); sx, zp: per row; rowsum: per column (int8 only). */
void vt_amx_reduce_run(int64_t int8, const void *scratch, int64_t r0, int64_t r1, int64_t nc, const float *sx,
                       const float *zp, const float *rowsum, float *dst) {
    if (int8)
        reduce_run_int8((const int32_t(*)[16][16])scratch, (int)r0, (int)r1, (int)nc, sx, zp, rowsum, dst);
    else
        reduce_run((const float(*)[16][16])scratch, (int)r0, (int)r1, (int)nc, dst);
}

/* C tile j += A · B tile, with the instruction of the kernel's type (tile numbers must be constants) */
#define DOT(int8, c, b)               \
    do {                              \
        if (int8)                     \
            _tile_dpbusd(c, 3, b);    \
        else                          \
            _tile_dpbf16ps(c, 3, b);  \
    } while (0)

/* The loop both kernels share. Both operands are 64 bytes per k-step and row (32 bf16 or 64 int8 values), so the
 * addressing is the same in bytes: x rows of row_bytes, w blocks of (row_bytes / 64) k-steps × 16 rows × 64 bytes.
 * For each group of tokens that stays in L2, each pass of NC column blocks, each tile of 16 tokens: C tiles ← Σ over
 * the k-steps of A · B, stored, and max-reduced run by run (rows of one text) into best. sx, zp, rowsum: int8 only. */
static inline void amx_max(int int8, const uint8_t *x, int64_t row_bytes, const int64_t *text_of, int64_t tokens,
                           const uint8_t *w, int64_t cb0, int64_t cb1, float *best, int64_t ldb, int64_t group_tokens,
                           const float *sx, const float *zp, const float *rowsum) {
    float scratch[NC][16][16] __attribute__((aligned(64))); /* fp32 (bf16) or int32 (int8) tiles */
    const int64_t ksteps = row_bytes / 64, block = ksteps * 16 * 64;
    configure();
    for (int64_t g0 = 0; g0 < tokens; g0 += group_tokens) {
        int64_t g1 = g0 + group_tokens < tokens ? g0 + group_tokens : tokens;
        for (int64_t cb = cb0; cb < cb1; cb += NC) {
            int nc = cb1 - cb < NC ? (int)(cb1 - cb) : NC;
            for (int64_t t0 = g0; t0 < g1; t0 += 16) {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                for (int64_t s = 0; s < ksteps; s++) {
                    _tile_loadd(3, x + t0 * row_bytes + s * 64, row_bytes);
                    const uint8_t *b = w + cb * block + s * 16 * 64;
                    _tile_loadd(4, b, 64);
                    DOT(int8, 0, 4);
                    if (nc > 1) {
                        _tile_loadd(5, b + block, 64);
                        DOT(int8, 1, 5);
                    }
                    if (nc > 2) {
                        _tile_loadd(6, b + 2 * block, 64);
                        DOT(int8, 2, 6);
                    }
                }
                _tile_stored(0, scratch[0], 64);
                if (nc > 1) _tile_stored(1, scratch[1], 64);
                if (nc > 2) _tile_stored(2, scratch[2], 64);
                int rows = t0 + 16 <= g1 ? 16 : (int)(g1 - t0);
                for (int r0 = 0; r0 < rows;) {
                    int64_t b = text_of[t0 + r0];
                    int r1 = r0 + 1;
                    while (r1 < rows && text_of[t0 + r1] == b) r1++;
                    float *dst = best + b * ldb + cb * 16;
                    if (int8)
                        reduce_run_int8((const int32_t(*)[16][16])scratch, r0, r1, nc, sx + t0, zp + t0,
                                        rowsum + cb * 16, dst);
                    else
                        reduce_run((const float(*)[16][16])scratch, r0, r1, nc, dst);
                    r0 = r1;
                }
            }
        }
    }
    _tile_release();
}

void vt_fused_max_bf16(const uint16_t *x, const int64_t *text_of, int64_t tokens, int64_t H, const uint16_t *w,
                     int64_t cb0, int64_t cb1, float *best, int64_t ldb, int64_t group_tokens) {
    amx_max(0, (const uint8_t *)x, H * 2, text_of, tokens, (const uint8_t *)w, cb0, cb1, best, ldb, group_tokens,
            NULL, NULL, NULL);
}

/* int8: x is uint8 [tokens, H] quantized per token (x ≈ sx[t] · (q - zp[t])), w the int8 weights packed for AMX's
 * B operand ([V/16][H/64 k-steps][16 k-quads][16 columns][4]), rowsum[v] = Σ_k w[v, k]. best[b, v] = max over the
 * tokens of text b of sx[t] · (q_t · w_v − zp[t] · rowsum[v]): the logit without the weight's per-column scale,
 * which the caller multiplies in after the max (it is positive). Integer dot products are exact (|q · w| < 2^24 also
 * keeps the conversion to fp32 exact). */
void vt_fused_max_int8(const uint8_t *x, const float *sx, const float *zp, const int64_t *text_of, int64_t tokens,
                     int64_t H, const int8_t *w, const float *rowsum, int64_t cb0, int64_t cb1, float *best,
                     int64_t ldb, int64_t group_tokens) {
    amx_max(1, x, H, text_of, tokens, (const uint8_t *)w, cb0, cb1, best, ldb, group_tokens, sx, zp, rowsum);
}
