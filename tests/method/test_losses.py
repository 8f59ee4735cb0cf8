"""Losses against hand-computed values on tiny examples."""

import math

import pytest
import torch

from vtlab.losses import InfoNCE, KLDivergence, MarginMSE, group_scores

# 2 queries, each with [positive, negative]; vocabulary of 3 terms.
Q = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 0.0]])
D = torch.tensor(
    [
        [1.0, 0.0, 1.0],  # q0 positive: score 1 + 2 = 3
        [0.0, 1.0, 0.0],  # q0 negative: score 0
        [0.0, 2.0, 0.0],  # q1 positive: score 2
        [1.0, 1.0, 0.0],  # q1 negative: score 1
    ]
)


def test_group_scores():
    assert group_scores(Q, D).tolist() == [[3.0, 0.0], [2.0, 1.0]]


def test_infonce_hard_negatives_only():
    # -log softmax: q0: -log(e^3/(e^3+e^0)); q1: -log(e^2/(e^2+e^1))
    expected = (math.log(1 + math.exp(-3)) + math.log(1 + math.exp(-1))) / 2
    assert InfoNCE(in_batch_negatives=False)(Q, D).item() == pytest.approx(expected, rel=1e-6)


def test_infonce_in_batch():
    # q0 scores vs all 4 docs: [3, 0, 0, 1]; q1: [0, 1, 2, 1]; targets rows 0 and 2
    l0 = -3 + math.log(math.exp(3) + 1 + 1 + math.exp(1))
    l1 = -2 + math.log(1 + math.exp(1) + math.exp(2) + math.exp(1))
    assert InfoNCE()(Q, D).item() == pytest.approx((l0 + l1) / 2, rel=1e-6)
    # temperature divides the scores
    l0t = -6 + math.log(math.exp(6) + 1 + 1 + math.exp(2))
    l1t = -4 + math.log(1 + math.exp(2) + math.exp(4) + math.exp(2))
    assert InfoNCE(temperature=0.5)(Q, D).item() == pytest.approx((l0t + l1t) / 2, rel=1e-6)


def test_margin_mse():
    teacher = torch.tensor([[5.0, 1.0], [2.0, 2.5]])
    # student margins: 3, 1; teacher margins: 4, -0.5 → ((3-4)^2 + (1+0.5)^2) / 2
    assert MarginMSE()(Q, D, teacher).item() == pytest.approx((1 + 2.25) / 2)


def test_kl_divergence():
    teacher = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    total = 0.0
    for s, t in (([3.0, 0.0], [0.0, 0.0]), ([2.0, 1.0], [1.0, 0.0])):
        ps = [math.exp(x) / sum(math.exp(y) for y in s) for x in s]
        pt = [math.exp(x) / sum(math.exp(y) for y in t) for x in t]
        total += sum(p * math.log(p / q) for p, q in zip(pt, ps))
    assert KLDivergence()(Q, D, teacher).item() == pytest.approx(total / 2, rel=1e-6)


def test_distillation_without_teacher_is_a_clear_error():
    with pytest.raises(ValueError, match="needs teacher scores"):
        MarginMSE()(Q, D, None)
