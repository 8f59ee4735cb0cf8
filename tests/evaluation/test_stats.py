"""vtlab.evaluation.stats: the paired tests against scipy, an exact enumeration of all sign flips, and a written-out t
interval; the seed-level test against sign patterns listed by hand, a null simulation (why it replaces the query level
as the reading), Holm against a worked example, the fixed sequence against hand cases and a simulation of its
family-wise error, the seed-level interval against hand arithmetic, and the power of the seed-level t against a
numerical integral of the non-central t, a Monte Carlo of t-tests and textbook sample sizes."""

import itertools
import math

import numpy as np
import pytest
from scipy import integrate
from scipy import stats as scipy_stats

from vtlab.evaluation.stats import (
    MAX_SEEDS,
    SeedComparison,
    StatsError,
    compare,
    compare_seeds,
    fixed_sequence,
    holm,
    mean_over_seeds,
    paired_arrays,
    power_of,
    randomization_test,
    seed_sign_flip_test,
    seed_t_interval,
    seed_t_test,
    seeds_for_power,
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


# ------------------------------------------------------------------------------------------------ seed level

# 3 seeds × 2 sets of unequal size: per seed, A − B on set x (3 queries) and set y (2 queries)
SEED_A = {
    "0": {"x": {"q1": 0.60, "q2": 0.50, "q3": 0.70}, "y": {"r1": 0.40, "r2": 0.90}},
    "1": {"x": {"q1": 0.55, "q2": 0.50, "q3": 0.65}, "y": {"r1": 0.45, "r2": 0.80}},
    "2": {"x": {"q1": 0.50, "q2": 0.40, "q3": 0.60}, "y": {"r1": 0.40, "r2": 0.85}},
}
SEED_B = {
    "0": {"x": {"q1": 0.50, "q2": 0.50, "q3": 0.64}, "y": {"r1": 0.40, "r2": 0.86}},
    "1": {"x": {"q1": 0.55, "q2": 0.47, "q3": 0.65}, "y": {"r1": 0.45, "r2": 0.81}},
    "2": {"x": {"q1": 0.55, "q2": 0.40, "q3": 0.60}, "y": {"r1": 0.44, "r2": 0.85}},
}


def per_seed_by_hand(a: dict, b: dict) -> list[float]:
    """Per seed, the mean over sets of the per-set mean difference (the avg column's difference), in plain Python."""
    out = []
    for s in sorted(a):
        per_set = [sum(a[s][k][q] - b[s][k][q] for q in a[s][k]) / len(a[s][k]) for k in sorted(a[s])]
        out.append(sum(per_set) / len(per_set))
    return out


def exact_seed_p(per_seed: list[float]) -> float:
    """Every sign pattern over the seeds, listed: the fraction at least as extreme as the observed one."""
    observed = abs(sum(per_seed))
    patterns = itertools.product((-1, 1), repeat=len(per_seed))
    sums = [abs(sum(s * d for s, d in zip(signs, per_seed))) for signs in patterns]
    return sum(x >= observed - 1e-12 for x in sums) / len(sums)


def test_seed_level_p_is_the_exact_enumeration_of_whole_seed_sign_flips() -> None:
    m = per_seed_by_hand(SEED_A, SEED_B)
    # by hand: seed 0: x (0.10 + 0 + 0.06)/3 = 0.0533, y 0.04/2 = 0.02 → 0.03667; seed 1: x 0.01, y −0.005 → 0.0025;
    # seed 2: x −0.05/3, y −0.02 → −0.01833
    assert m == pytest.approx([0.036667, 0.0025, -0.018333], abs=1e-6)
    # patterns: |±0.03667 ± 0.0025 ± 0.01833| ≥ 0.02083 for (+,+,−), (+,+,+), (+,−,+) and their mirrors: 6 of 8
    assert exact_seed_p(m) == 0.75
    c = compare_seeds(SEED_A, SEED_B)
    assert c.seeds == ("0", "1", "2") and c.exact and c.n == 3
    assert c.p == pytest.approx(0.75) and c.delta == pytest.approx(sum(m) / 3)
    assert c.min_p == 0.25  # 3 seeds cannot give less: the observed pattern and its mirror
    # stratified: set y weighs as much as set x although it has fewer queries (query-weighted would differ)
    pooled = np.mean([[SEED_A[s][k][q] - SEED_B[s][k][q] for k in "xy" for q in SEED_A[s][k]] for s in SEED_A])
    assert c.delta != pytest.approx(pooled)
    assert compare_seeds(SEED_B, SEED_A).p == c.p  # two-sided
    # the seed-level t (the decision test): t = mean / (sd / √n), and for df = 2 the t distribution has the closed
    # form P(|T| ≥ t) = 1 − t / √(2 + t²)
    t = np.mean(m) / (np.std(m, ddof=1) / np.sqrt(3))
    assert c.p_t == pytest.approx(1 - abs(t) / np.sqrt(2 + t * t), rel=1e-9)
    assert compare_seeds(SEED_B, SEED_A).p_t == pytest.approx(c.p_t)
    assert seed_t_test(np.zeros(3)) == 1.0 and np.isnan(seed_t_test(np.array([0.02])))
    assert np.isnan(seed_t_test(np.array([0.02, 0.02, 0.02])))  # no seed variance: not a p of 0


def test_seed_level_enumerates_up_to_16_seeds_and_samples_beyond() -> None:
    rng = np.random.default_rng(1)
    m = rng.normal(0.01, 0.02, 12)
    p, exact = seed_sign_flip_test(m)
    assert exact and p == pytest.approx(exact_seed_p(list(m)))
    m = rng.normal(0.015, 0.03, 18)  # 262,144 patterns: sampled, close to the full enumeration
    signs = 1 - 2 * ((np.arange(2**18)[:, None] >> np.arange(18)) & 1)
    full = float(np.mean(np.abs(signs @ m) >= abs(m.sum()) - 1e-12))
    p, exact = seed_sign_flip_test(m)
    assert not exact and 0.01 < full < 0.5 and p == pytest.approx(full, abs=0.02)
    assert seed_sign_flip_test(np.zeros(3)) == (1.0, True)
    assert seed_sign_flip_test(np.array([0.03])) == (1.0, True)  # one seed: x and its mirror, both as extreme


def test_seed_level_pairs_seeds_and_refuses_what_cannot_be_paired() -> None:
    extra = {**SEED_A, "7": SEED_A["0"]}  # a seed B never ran is left out, not paired with another
    assert compare_seeds(extra, SEED_B).seeds == ("0", "1", "2")
    with pytest.raises(StatsError, match="no seed in common"):
        compare_seeds({"5": SEED_A["0"]}, SEED_B)
    with pytest.raises(StatsError, match="seed 1 has other sets"):
        compare_seeds({**SEED_A, "1": {"x": SEED_A["1"]["x"]}}, SEED_B)


def simulate(n_seeds: int, rng: np.random.Generator, seed_sd: float = 0.04) -> tuple[float, float]:
    """One null experiment: two arms of one method (same distribution), n_seeds runs each on 2 sets (60 + 30
    queries); a run shifts every query by its own seed effect (sd `seed_sd`, as the tables' spread over seeds), each
    query adds its own noise. Returns (query-level p on the seed means, seed-level p)."""
    sizes = {"x": 60, "y": 30}
    base = {k: rng.uniform(0.3, 0.8, n) for k, n in sizes.items()}  # query difficulty, shared by both arms

    def arm() -> dict:
        return {
            str(s): {k: dict(enumerate(base[k] + shift + rng.normal(0, 0.1, n))) for k, n in sizes.items()}
            for s, shift in enumerate(rng.normal(0, seed_sd, n_seeds))
        }

    a, b = arm(), arm()
    means = [
        np.mean([[a[s][k][q] for q in range(n)] for s in a], axis=0)
        - np.mean([[b[s][k][q] for q in range(n)] for s in b], axis=0)
        for k, n in sizes.items()
    ]
    d = np.concatenate(means)
    return randomization_test(d, np.zeros_like(d), n_permutations=2_000), compare_seeds(a, b).p


def test_null_simulation_seed_level_holds_alpha_query_level_does_not() -> None:
    """200 null experiments at 8 seeds: the seed-level test rejects at ≈ 5%, the query-level test (what the report
    used to read) far more often — it takes each arm's seed mean as a fixed model, so two runs of one method that
    happen to differ look significantly different. At the tables' 3 seeds the seed level cannot reject at all."""
    rng = np.random.default_rng(0)
    results = np.array([simulate(8, rng) for _ in range(200)])
    query_rate, seed_rate = (results < 0.05).mean(axis=0)
    assert seed_rate <= 0.10 and query_rate >= 0.4
    three = np.array([simulate(3, rng) for _ in range(50)])
    assert (three[:, 1] >= 0.25).all() and (three[:, 0] < 0.05).mean() >= 0.4


# ------------------------------------------------------------------------------------------------ Holm


def test_holm_against_a_worked_example() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 (m = 4) → 4·0.005 = 0.02, 3·0.01 = 0.03, 2·0.03 = 0.06, max(1·0.04, 0.06) = 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.02, 0.015]) == pytest.approx([0.03, 0.03])  # step-down keeps the order: max with the earlier
    assert holm([0.4, 0.9]) == pytest.approx([0.8, 0.9]) and holm([0.6, 0.7]) == [1.0, 1.0]
    adjusted = holm([0.01, float("nan"), 0.02])  # an untested claim still counts in m = 3
    assert adjusted[0] == pytest.approx(0.03) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.04)
    assert holm([]) == []


def test_holm_equals_statsmodels() -> None:
    from statsmodels.stats import multitest  # a dev dependency: a broken install fails here

    p = np.random.default_rng(3).uniform(0, 0.2, 9)
    assert holm(p) == pytest.approx(multitest.multipletests(p, method="holm")[1])


# ------------------------------------------------------------------------------------------------ fixed sequence


def test_fixed_sequence_hand_cases() -> None:
    # primary 0.03 < 0.05: rejected, so the secondaries are tested with Holm over their own family of 3:
    # sorted 0.01, 0.04, 0.20 → 3·0.01 = 0.03, 2·0.04 = 0.08, max(1·0.20, 0.08) = 0.20
    seq = fixed_sequence(0.03, [0.01, 0.04, 0.20])
    assert seq.primary_rejected and seq.secondary_tested
    assert seq.secondary_adjusted == pytest.approx([0.03, 0.08, 0.20])
    assert seq.secondary_rejected() == [True, False, False]
    # the primary is not multiplied by the family size: plain Holm over all four would give it 3·0.03 = 0.09
    assert holm([0.03, 0.01, 0.04, 0.20])[0] == pytest.approx(0.09)
    # primary 0.06: not rejected, so nothing behind it is tested; the secondaries' Holm p is still computed
    seq = fixed_sequence(0.06, [0.01, 0.04, 0.20])
    assert not seq.primary_rejected and not seq.secondary_tested
    assert seq.secondary_adjusted == pytest.approx([0.03, 0.08, 0.20])
    assert seq.secondary_rejected() == [False, False, False]
    assert not fixed_sequence(0.05, [0.001]).primary_rejected  # rejected only strictly below alpha
    assert fixed_sequence(0.009, [0.02], alpha=0.01).secondary_rejected(0.01) == [False]  # Holm p 0.02 ≥ 0.01


def test_fixed_sequence_nan_and_empty() -> None:
    # an untestable primary (NaN) is not rejected: the secondaries are not tested
    seq = fixed_sequence(float("nan"), [0.001, 0.002])
    assert not seq.primary_rejected and seq.secondary_rejected() == [False, False]
    # an untestable secondary stays NaN, never rejected, and still counts in the family (m = 3):
    # sorted 0.01, 0.02 → 3·0.01 = 0.03, 2·0.02 = 0.04
    seq = fixed_sequence(0.01, [0.01, float("nan"), 0.02])
    assert seq.secondary_adjusted[0] == pytest.approx(0.03) and seq.secondary_adjusted[2] == pytest.approx(0.04)
    assert math.isnan(seq.secondary_adjusted[1]) and seq.secondary_rejected() == [True, False, True]
    seq = fixed_sequence(0.01, [])  # a primary alone
    assert seq.primary_rejected and seq.secondary_adjusted == [] and seq.secondary_rejected() == []
    with pytest.raises(StatsError, match="alpha"):
        fixed_sequence(0.01, [0.02], alpha=0)


def test_fixed_sequence_holds_the_family_wise_error() -> None:
    """Independent p-values, uniform under their null. A false primary null (p = 0, always rejected) with three true
    secondary nulls: a false rejection is Holm's, P(min p < 0.05 / 3) = 1 − (1 − 0.05/3)^3 = 0.0492 — at most alpha,
    where testing each secondary at 0.05 behind the gate would give 1 − 0.95^3 = 0.143. All four nulls true: every
    false rejection needs the primary's first, P = 0.05. Standard error of a rate near 0.05 over 40,000 draws:
    √(0.05 · 0.95 / 40,000) = 0.0011; the bounds allow 4 of them."""
    rng = np.random.default_rng(5)
    p = rng.uniform(size=(40_000, 4))
    gated = np.mean([any(fixed_sequence(0.0, list(row[1:])).secondary_rejected()) for row in p])
    assert gated == pytest.approx(1 - (1 - 0.05 / 3) ** 3, abs=0.0045) and gated <= 0.05 + 0.0045
    assert np.mean((p[:, 1:] < 0.05).any(axis=1)) == pytest.approx(1 - 0.95**3, abs=0.007)  # unadjusted: no control
    null = np.mean(
        [(s := fixed_sequence(row[0], list(row[1:]))).primary_rejected or any(s.secondary_rejected()) for row in p]
    )
    assert null == pytest.approx(0.05, abs=0.0045)


# ------------------------------------------------------------------------------------------------ power


def power_by_integral(n: int, sd: float, effect: float, alpha: float = 0.05) -> float:
    """The power of the two-sided one-sample t-test without the non-central t: T = (Z + δ) / √(V / df), Z standard
    normal, V ~ χ²(df) independent, δ = effect · √n / sd; given V = v, T > c ⟺ Z > c √(v/df) − δ, so power =
    E_V[Φ̄(c √(V/df) − δ) + Φ(−c √(V/df) − δ)], integrated over V's quantiles u ∈ (0, 1) (V = χ²⁻¹(u), a smooth
    bounded integrand on a finite interval)."""
    df = n - 1
    c = scipy_stats.t.ppf(1 - alpha / 2, df)
    delta = abs(effect) * math.sqrt(n) / sd

    def given(u: float) -> float:
        s = c * math.sqrt(scipy_stats.chi2.ppf(u, df) / df)
        return scipy_stats.norm.sf(s - delta) + scipy_stats.norm.cdf(-s - delta)

    return integrate.quad(given, 0, 1, epsabs=1e-12, epsrel=1e-10, limit=200)[0]


def first_with_power(n: int, sd: float, effect: float, alpha: float = 0.05, power: float = 0.8) -> bool:
    """Whether n is the smallest number of seeds with the power, by the integral: n − 1 falls short, n reaches it
    (the power rises with n)."""
    short = n > 2 and power_by_integral(n - 1, sd, effect, alpha) < power
    return (n == 2 or short) and power_by_integral(n, sd, effect, alpha) >= power


@pytest.mark.parametrize(
    ("n", "sd", "effect", "alpha"),
    [
        (10, 1.0, 1.0, 0.05),
        (34, 1.0, 0.5, 0.05),
        (2, 1.0, 3.0, 0.05),
        (3, 0.002, 0.01, 0.025),
        (5, 0.006, -0.01, 0.05),
        (20, 0.03, 0.01, 0.05 / 7),
        (199, 1.0, 0.2, 0.05),
        (1000, 1.0, 0.05, 0.05),
    ],
)
def test_power_equals_the_integral_over_the_chi_square(n: int, sd: float, effect: float, alpha: float) -> None:
    assert power_of(n, sd, effect, alpha) == pytest.approx(power_by_integral(n, sd, effect, alpha), abs=1e-9)


def test_power_against_a_monte_carlo_of_t_tests() -> None:
    """200,000 simulated experiments of n = 6 seeds with per-seed differences N(0.01, 0.008²) (d = 1.25), each a
    two-sided one-sample t-test at 0.05 written out (t = mean / (s / √n) against t.ppf(0.975, 5)). The rejection
    rate's standard error is √(p (1 − p) / 200,000) ≤ 0.0011; the tolerance is 4 of them."""
    rng = np.random.default_rng(7)
    x = rng.normal(0.01, 0.008, size=(200_000, 6))
    t = x.mean(axis=1) / (x.std(axis=1, ddof=1) / math.sqrt(6))
    rate = float(np.mean(np.abs(t) > scipy_stats.t.ppf(0.975, 5)))
    assert 0.3 < rate < 0.9  # a power where the comparison means something
    assert power_of(6, 0.008, 0.01) == pytest.approx(rate, abs=4 * math.sqrt(rate * (1 - rate) / 200_000))


def test_seeds_for_power_textbook_values() -> None:
    # one-sample (paired) t, two-sided, alpha 0.05, 80% power: d = 1.0 needs 10, d = 0.5 needs 34 (G*Power's and
    # Cohen's tables); the integral confirms both sides of each boundary
    assert power_by_integral(9, 1.0, 1.0) < 0.8 <= power_by_integral(10, 1.0, 1.0)
    assert power_by_integral(33, 1.0, 0.5) < 0.8 <= power_by_integral(34, 1.0, 0.5)
    assert seeds_for_power(1.0, 1.0) == 10 and seeds_for_power(1.0, 0.5) == 34
    # only d = effect / sd matters, not its sign: an effect of 0.01 nDCG@10 at a per-seed SD of 0.02 is d = 0.5
    assert seeds_for_power(0.02, 0.01) == 34 and seeds_for_power(0.01, -0.01) == 10
    # d = 0.2 at 0.05 lands close to the boundary: power 0.7997 at 198, 0.8017 at 199
    assert seeds_for_power(1.0, 0.2) == 199 and first_with_power(199, 1.0, 0.2)


def test_seeds_for_power_at_a_bonferroni_level_and_the_cap() -> None:
    for sd, alpha in ((0.012, 0.05 / 3), (0.03, 0.05 / 7), (0.004, 0.05 / 2), (0.001, 0.05 / 4)):
        assert first_with_power(seeds_for_power(sd, 0.01, alpha), sd, 0.01, alpha)
    assert seeds_for_power(0.012, 0.01, 0.05 / 3) > seeds_for_power(0.012, 0.01)  # a stricter level needs more
    assert seeds_for_power(0.02, 0.01, power=0.9) > 34  # and so does more power
    assert seeds_for_power(1.0, 0.5, max_seeds=33) is None and seeds_for_power(1.0, 0.5, max_seeds=34) == 34
    # an effect small for its spread: d = 0.01 / 0.3 needs about 7,000 seeds, beyond the search
    assert seeds_for_power(0.3, 0.01) is None and MAX_SEEDS == 1000
    assert seeds_for_power(0.01, 0.0) is None  # no effect: the power is alpha at every n
    assert power_of(4, 0.01, 0.0) == pytest.approx(0.05, abs=1e-12) and power_of(4, 0.01, 0.0, alpha=0.01) == (
        pytest.approx(0.01, abs=1e-12)
    )


def test_power_edge_cases() -> None:
    # a spread tiny next to the effect: two seeds already give power 1
    assert seeds_for_power(1e-6, 0.01) == 2 and seeds_for_power(1e-9, 0.01, alpha=0.05 / 10) == 2
    # δ = 10^4 · √79 at df 78, where scipy's non-central t returns NaN: the power is 1 (the bound in _power)
    assert power_of(79, 1.0, 1e4) == 1.0
    assert power_of(2, 1.0, 20.0) == pytest.approx(power_by_integral(2, 1.0, 20.0), abs=1e-9)  # df 1
    with pytest.raises(StatsError, match="sd > 0"):
        seeds_for_power(0.0, 0.01)
    with pytest.raises(StatsError, match="n >= 2"):
        power_of(1, 0.01, 0.01)
    with pytest.raises(StatsError, match="power"):
        seeds_for_power(0.01, 0.01, power=1.0)


def test_seed_t_interval_by_hand() -> None:
    # d̄ = 0.012, s = 0.002, n = 3: t_(0.975, df 2) = 4.302653 (a t table), half-width 4.302653 · 0.002 / √3
    half = 4.302653 * 0.002 / math.sqrt(3)
    assert seed_t_interval([0.010, 0.014, 0.012]) == pytest.approx((0.012 - half, 0.012 + half), rel=1e-6)
    assert all(math.isnan(x) for x in seed_t_interval([0.02]))
    assert seed_t_interval([0.02, 0.02]) == (0.02, 0.02)
    c = SeedComparison(("0", "1", "2"), (0.010, 0.014, 0.012), 0.012, 0.25, True, 0.009)
    assert c.ci == pytest.approx((0.012 - half, 0.012 + half), rel=1e-6)
