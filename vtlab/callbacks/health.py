"""Training-health measurements for SPLADE's two failure modes (the callbacks beside this module use them).

* dead collapse: every term weight is 0 (relu of negative logits), so there is no gradient and training can never
  recover (the mmBERT-on-Korean case: active dims fall to 0 and retrieval with them);
* dense collapse: every vocabulary entry is active, documents are near-identical (pairwise cosine ≈ 1) and nDCG is
  ~0 (sentence-transformers issue #3431; a saturated MLM head or a vocabulary gap after a backbone swap).

The preflight callback probes the model once before the first step, health_monitor logs per-step health metrics,
and collapse_detector stops (or warns) when a collapse persists, leaving a checkpoint and a diagnosis behind.
"""

from __future__ import annotations

import torch
from torch import Tensor

DEAD_FIX = (
    "the decoder bias is too negative (or the regularizer weight λ / the learning rate is too large): lower the "
    "regularizer weight, enable apc=p60 to calibrate the decoder bias, and check the λ warm-up"
)
DENSE_FIX = (
    "the MLM head is saturated — the vocabulary-gap failure (or λ is too small): enable apc=p60; try "
    "vocab=bert-uncased init=semantic apc=p60; increase the regularizer weight"
)


# ---------------------------------------------------------------------------------------------------- statistics


def active_dims(w: Tensor) -> float:
    """Mean number of non-zero terms per row."""
    return float((w != 0).sum(1).float().mean()) if w.numel() else 0.0


def mean_pairwise_cosine(w: Tensor) -> float:
    """Mean cosine over distinct row pairs; all-zero rows count as cosine 0 (a dead model is not 'similar')."""
    n = w.shape[0]
    if n < 2:
        return 0.0
    x = torch.nn.functional.normalize(w.float(), dim=1)  # zero rows stay zero
    sim = x @ x.T
    return float((sim.sum() - sim.diagonal().sum()) / (n * (n - 1)))


def flops(q: Tensor, d: Tensor) -> float:
    """Σ_v p_q(v)·p_d(v) over the batch (the SPLADE FLOPS estimate, as in `evaluation.sparsity_stats`). Summed in
    float64, so that the value logged (float32) does not depend on the BLAS kernel's summation order: a resumed run
    logs the uninterrupted run's values."""
    return float((q != 0).double().mean(0) @ (d != 0).double().mean(0))


def margin(q: Tensor, d: Tensor, group_size: int) -> float | None:
    """Mean over queries of positive score − max negative score (own negatives; in-batch ones when there are none)."""
    b = q.shape[0]
    scores = q.double() @ d.double().T  # [B, B*G]; float64 for the reason flops() gives
    pos_col = torch.arange(b, device=q.device) * group_size
    pos = scores[torch.arange(b, device=q.device), pos_col]
    if group_size > 1:
        neg = scores.view(b, b, group_size)[torch.arange(b), torch.arange(b), 1:].max(1).values
    elif b > 1:
        masked = scores.clone()
        masked[torch.arange(b), pos_col] = float("-inf")
        neg = masked.max(1).values
    else:
        return None
    return float((pos - neg).mean())


def side_stats(q: Tensor, d: Tensor) -> dict[str, float]:
    vocab = q.shape[1]
    qd, dd = active_dims(q), active_dims(d)
    return {
        "query_active_dims": qd,
        "doc_active_dims": dd,
        "query_active_share": qd / vocab,
        "doc_active_share": dd / vocab,
        "doc_cosine": mean_pairwise_cosine(d),
    }
