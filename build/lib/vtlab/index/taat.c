/* Exact top-k over term-major posting lists: cache-blocked term-at-a-time accumulation + a k-heap scan.
 *
 * Built on first use by vtlab/index/native.py (cc -O3 -shared -fPIC -ffp-contract=off) and called through ctypes,
 * which releases the GIL, so Python threads run query slices on all cores.
 *
 * Postings: CSR of Dᵀ (row t = term t: doc ids ascending, float32 weights). Queries: CSR with sorted term ids.
 * For each query the doc-id space is walked in blocks of `block` docs (an accumulator that stays in L2): every
 * query term's posting cursor advances through the block adding q_t·w into the block's accumulator, then the block
 * is scanned into a size-k heap and zeroed again while it is still in cache. Each doc's contributions are added in
 * ascending term order, in float32, without FMA contraction — the same arithmetic as scipy's SpGEMM, so scores equal
 * scipy's bit for bit. Ranking: score descending, ties by lower doc id (every doc, zero-score ones included).
 */
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    float s;
    int64_t d;
} hit_t;

/* heap root = the worst kept hit: lowest score, and among equal scores the highest doc id */
static inline int worse(const hit_t *a, const hit_t *b) {
    return a->s < b->s || (a->s == b->s && a->d > b->d);
}

static void sift_down(hit_t *h, int64_t n, int64_t i) {
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && worse(&h[l], &h[m])) m = l;
        if (r < n && worse(&h[r], &h[m])) m = r;
        if (m == i) return;
        hit_t t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void sift_up(hit_t *h, int64_t i) {
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!worse(&h[i], &h[p])) return;
        hit_t t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

/* Queries [q_begin, q_end): writes k results per query into out_scores / out_docs (row q - q_begin).
 * acc: `block` floats, all zero on entry (left zero); cursor: room for the longest query; heap: k entries.
 * Returns the number of postings scored. */
int64_t vt_taat_topk(const int64_t *p_indptr, const int32_t *p_docs, const float *p_w, int64_t n_docs,
                     const int64_t *q_indptr, const int32_t *q_terms, const float *q_w, int64_t q_begin,
                     int64_t q_end, int64_t k, int64_t block, float *acc, int64_t *cursor, hit_t *heap,
                     float *out_scores, int64_t *out_docs) {
    int64_t scored = 0;
    for (int64_t q = q_begin; q < q_end; q++) {
        const int64_t lo = q_indptr[q], m = q_indptr[q + 1] - lo;
        for (int64_t j = 0; j < m; j++) cursor[j] = p_indptr[q_terms[lo + j]];
        int64_t filled = 0;
        for (int64_t b0 = 0; b0 < n_docs; b0 += block) {
            const int64_t b1 = b0 + block < n_docs ? b0 + block : n_docs;
            for (int64_t j = 0; j < m; j++) {
                const int64_t end = p_indptr[q_terms[lo + j] + 1];
                const float w = q_w[lo + j];
                int64_t c = cursor[j];
                const int64_t c0 = c;
                while (c < end && p_docs[c] < b1) {
                    acc[p_docs[c] - b0] += w * p_w[c];
                    c++;
                }
                scored += c - c0;
                cursor[j] = c;
            }
            for (int64_t i = 0; i < b1 - b0; i++) {
                const float s = acc[i];
                acc[i] = 0.0f;
                if (filled < k) {
                    heap[filled].s = s;
                    heap[filled].d = b0 + i;
                    sift_up(heap, filled++);
                } else if (s > heap[0].s) { /* docs arrive in id order: an equal score never displaces */
                    heap[0].s = s;
                    heap[0].d = b0 + i;
                    sift_down(heap, k, 0);
                }
            }
        }
        /* pop worst-first into the row from its end: the row ends up best-first */
        float *rs = out_scores + (q - q_begin) * k;
        int64_t *rd = out_docs + (q - q_begin) * k;
        for (int64_t n = filled; n > 0; n--) {
            rs[n - 1] = heap[0].s;
            rd[n - 1] = heap[0].d;
            heap[0] = heap[n - 1];
            sift_down(heap, n - 1, 0);
        }
    }
    return scored;
}
