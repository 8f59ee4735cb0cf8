"""vtlab.stats: the paired tests against scipy, an exact enumeration of all sign flips, and a written-out t interval."""
import itertools
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from vtlab.stats import (
    StatsError,
    compare,
    mean_over_seeds,
    paired_arrays,
    randomization_test,
    t_test,
)

# ten per-query differences, a mix of signs: the exact two-sided p-value is neither tiny nor near 1
A = np.array([0.62, 0.48, 0.91, 0.33, 0.75, 0.57, 0.80, 0.44, 0.69, 0.52])
B = np.array([0.55, 0.50, 0.70, 0.30, 0.71, 0.60, 0.62, 0.41, 0.70, 0.49])


def exact_sign_flip_p(a: np.ndarray, b: np.ndarray) -> float:
    """All 2^n sign vectors, enumerated: the fraction whose |Σ s·d| is at least the observed |Σ d|."""
    d = a - b
    observed = abs(d.sum())
    flips = [abs(np.dot(s, d)) for s in itertools.product((-1.0, 1.0), repeat=d.size)]
    return sum(f >= observed - 1e-12 for f in flips) / len(flips)


def test_randomization_p_is_close_to_the_exact_enumeration() -> None:
    exact = exact_sign_flip_p(A, B)
    assert 0.02 < exact < 0.5  # a p-value where Monte Carlo error matters
    p = randomization_test(A, B)  # default: 10,000 sign vectors, seed 0
    # Monte Carlo standard error at 10,000 draws: sqrt(p (1 - p) / 10,000) ≤ 0.005; allow ~4 of them
    assert p == pytest.approx(exact, abs=0.02)
    assert randomization_test(A, B, n_permutations=100_000, seed=3) == pytest.approx(exact, abs=0.006)
    assert randomization_test(A, B) == p  # fixed seed: reruns of a report agree
    assert randomization_test(B, A) == p  # two-sided


def test_randomization_p_extremes() -> None:
    a = np.linspace(0.5, 0.9, 40)
    # every query better by 0.2: only the observed assignment (and its mirror) is as extreme; never exactly 0
    p = randomization_test(a, a - 0.2)
    assert p == pytest.approx(1 / 10_001, abs=3 / 10_001) and p > 0
    assert randomization_test(a, a) == 1.0  # no difference at all: every assignment is as extreme
    with pytest.raises(StatsError, match="equal-length"):
        randomization_test(a, a[:-1])


def test_t_test_equals_scipy_and_the_written_out_interval() -> None:
    p, low, high = t_test(A, B)
    assert p == pytest.approx(scipy_stats.ttest_rel(A, B).pvalue, rel=1e-12)
    d = A - B
    half = scipy_stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size)
    assert (low, high) == pytest.approx((d.mean() - half, d.mean() + half), rel=1e-10)
    assert t_test(A, A) == (1.0, 0.0, 0.0)  # identical systems: nothing to test, not scipy's nan


def test_compare_pairs_queries_by_id() -> None:
    ids = [f"q{i}" for i in range(10)]
    a = dict(zip(ids, A))
    b = dict(zip(reversed(ids), reversed(B)))  # another order: pairing is by id, not position
    c = compare(a, b)
    assert c.n == 10 and c.delta == pytest.approx((A - B).mean())
    assert c.mean_a == pytest.approx(A.mean()) and c.mean_b == pytest.approx(B.mean())
    assert c.p_t == pytest.approx(scipy_stats.ttest_rel(A, B).pvalue)
    assert c.p_randomization == randomization_test(A, B)
    with pytest.raises(StatsError, match=r"query sets differ \(1 only in the first, e.g. \['q9'\]; 0 only"):
        paired_arrays(a, {q: v for q, v in b.items() if q != "q9"})


def test_mean_over_seeds() -> None:
    seeds = [{"q1": 0.2, "q2": 0.4}, {"q2": 0.8, "q1": 0.6}, {"q1": 0.1, "q2": 0.0}]
    assert mean_over_seeds(seeds) == pytest.approx({"q1": 0.3, "q2": 0.4})
    with pytest.raises(StatsError, match="seed 1 has other queries than seed 0"):
        mean_over_seeds([{"q1": 0.2}, {"q2": 0.2}], what="row x")
