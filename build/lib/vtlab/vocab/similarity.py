"""The similarity side of semantic initialization (vtlab.vocab.init.Semantic): the new-by-overlap similarity matrix
S in row chunks, its pmi / z-score transforms, sparsemax weights and the weighted source rows."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor

# Partial sort size for sparsemax: entmax doubles it for rows whose support is larger, so results are exact;
# a full sort of 17k columns per row is what would otherwise dominate the semantic init's run time.
SPARSEMAX_K = 128
ZSCORE_EPS = 1e-6  # added to the column std (as in the authors' code) so constant columns do not divide by 0


class Similarities:
    """S = t_new @ t_ov.T (cosine when both are row-normalized), `chunk_rows` rows at a time, for `passes` passes
    over it. The first pass's chunks are kept for the second when S fits KEEP_BYTES (pmi then costs one GEMM, not
    two; S has at most (target vocabulary / 2)² entries: 0.9 GB for bert-base-uncased's), and each kept chunk is
    released as the last pass yields it; a larger S is recomputed."""

    KEEP_BYTES = 2**30

    def __init__(self, t_new: Tensor, t_ov: Tensor, chunk_rows: int, passes: int = 1) -> None:
        self.t_new, self.t_ov, self.chunk_rows, self.passes = t_new, t_ov, chunk_rows, passes
        self._kept: list[Tensor] | None = None

    def __iter__(self) -> Iterator[tuple[int, Tensor]]:
        self.passes -= 1
        if self._kept is not None:
            kept, self._kept = self._kept, None
            for i in range(len(kept)):
                chunk, kept[i] = kept[i], None  # the caller may overwrite it; nothing else holds it
                yield i * self.chunk_rows, chunk
            return
        keep = self.passes > 0 and self.t_new.shape[0] * self.t_ov.shape[0] * 4 <= self.KEEP_BYTES
        stored: list[Tensor] = []
        t_ov_t = self.t_ov.T.contiguous()
        for lo in range(0, self.t_new.shape[0], self.chunk_rows):
            chunk = self.t_new[lo : lo + self.chunk_rows] @ t_ov_t
            if keep:
                stored.append(chunk.clone())
            yield lo, chunk
        if keep:
            self._kept = stored


def sparsemax(scores: Tensor) -> Tensor:
    import entmax

    k = SPARSEMAX_K if scores.shape[1] > SPARSEMAX_K else None
    return entmax.sparsemax(scores, dim=-1, k=k)


def weighted_rows(w: Tensor, e_ov: Tensor, nnz: int) -> Tensor:
    """w @ e_ov, through a sparse matrix when w (with nnz non-zeros) is sparse (usually a handful per row)."""
    if nnz * 8 < w.numel():
        if not nnz:
            return torch.zeros(w.shape[0], e_ov.shape[1])
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
            return torch.sparse.mm(w.to_sparse_csr(), e_ov)
    return w @ e_ov


def pmi_transform(sims: Similarities):
    """PPMI of the whole matrix: X = (S−min)/(max−min), PMI = log(P / (Pi·Pj)) clamped at 0, with P = X/ΣX.

    Pass 1 finds min and max of S. The raw row/column sums of S need no pass: S is a product, so its row sums are
    t_new @ Σ_j t_ov[j] and its column sums t_ov @ Σ_i t_new[i] (in float64). The sums of X follow linearly
    (Σ_j X_ij = (Σ_j S_ij − |O|·min)/(max−min)), so pass 2 can emit PMI rows chunk by chunk. Since
    P/(Pi·Pj) = X·ΣX/(rowX·colX), the normalization by ΣX never has to be materialized.
    """
    t_new, t_ov = sims.t_new.double(), sims.t_ov.double()
    n, m = t_new.shape[0], t_ov.shape[0]
    lo_v, hi_v = float("inf"), float("-inf")
    for _, s in sims:
        s_min, s_max = torch.aminmax(s)
        lo_v, hi_v = min(lo_v, float(s_min)), max(hi_v, float(s_max))
    span = hi_v - lo_v
    if not np.isfinite(span) or span <= 0:
        # A constant matrix carries no information: all-zero PPMI, i.e. uniform weights (the overlap mean).
        return lambda lo, s: torch.zeros_like(s)
    row_x = (t_new @ t_ov.sum(dim=0) - m * lo_v) / span
    col_x = (t_ov @ t_new.sum(dim=0) - n * lo_v) / span
    log_total = float(np.log(float(row_x.sum())))
    # Empty rows/columns (all at the global min) only multiply X = 0 entries, which are 0 anyway.
    log_row = torch.log(row_x.clamp_min(1e-300)).float()
    log_col = (torch.log(col_x.clamp_min(1e-300)) - log_total).float()

    def transform(lo: int, s: Tensor) -> Tensor:
        # in place, no temporaries: x = (s − min)/span ≥ 0, and log 0 = −inf is clamped to 0 with every negative PMI
        x = s.sub_(lo_v).div_(span)
        return x.log_().sub_(log_row[lo : lo + s.shape[0]].unsqueeze(1)).sub_(log_col.unsqueeze(0)).clamp_min_(0.0)

    return transform


def zscore_transform(sims: Similarities):
    """Z = (S − column mean)/(column std + eps) (population std), then each row divided by its max.

    The column moments need no pass over S: Σ_i S_ij = t_ov[j] · Σ_i t_new[i] and Σ_i S_ij² = t_ov[j]ᵀ G t_ov[j]
    with G = t_newᵀ t_new (float64). A row whose max is ≤ 0 (all z-scores negative: possible only in degenerate
    cases) is left undivided, since dividing by a negative number would invert the ranking.
    """
    t_new, t_ov = sims.t_new.double(), sims.t_ov.double()
    n = t_new.shape[0]
    s1 = t_ov @ t_new.sum(dim=0)
    s2 = ((t_ov @ (t_new.T @ t_new)) * t_ov).sum(dim=1)
    mean = s1 / n
    std = (s2 / n - mean * mean).clamp_min(0.0).sqrt() + ZSCORE_EPS
    mean, std = mean.float(), std.float()

    def transform(lo: int, s: Tensor) -> Tensor:
        z = (s - mean) / std
        top = z.max(dim=1, keepdim=True).values
        return z / torch.where(top > 0, top, torch.ones_like(top))

    return transform
