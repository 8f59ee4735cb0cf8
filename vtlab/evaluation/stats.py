"""Paired significance for the contrasts of a table (e.g. VT vs lowercase), at two levels.

Query level (`compare`): two systems' per-query scores on the same queries, compared query by query — the paired
randomization (sign-flip) test (under H0 the two systems are exchangeable per query, so each per-query difference is
equally likely to have either sign) and the paired t-test (scipy.stats.ttest_rel), with the 95% CI of the mean
difference from the same t distribution. Both two-sided. With a row's seeds averaged first, this treats the trained
models as fixed: its p-value covers the sampling of queries, not the variation of training runs, so a difference
between two runs of one method that happen to differ is "significant".

Seed level (`compare_seeds`): the unit is a training run. Seed i of arm A is matched with seed i of arm B; under H0
(the method does not matter) the two runs of a matched seed are exchangeable, so the sign of the seed's whole
difference — every query of every set at once — is equally likely to be + or −. The statistic is the table's
average-column difference: per seed, the mean over sets of the per-set mean difference over queries (stratified by
set), then the mean over seeds. Its null distribution is every sign pattern over the matched seeds (enumerated up to
2^16, sampled beyond), so n seeds cannot give a p-value below 2 / 2^n (3 seeds: 0.25).

Deciding: `fixed_sequence` tests a table's declared primary contrast first, alone, at alpha on its unadjusted
seed-level t p, and the other contrasts (Holm over them) only once the primary is rejected — gatekeeping that keeps
the family-wise error at alpha; `holm` is the plain adjustment for a table without a primary. `seed_t_interval` is
the 95% CI of the mean per-seed difference; `power_of` / `seeds_for_power` plan the seeds from the non-central t: the
power of the seed-level t-test against a declared minimum effect at the observed per-seed spread, and the fewest
seeds at which that power reaches 80% (a planning figure, not a test).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from vtlab.core.errors import VtlabError

N_PERMUTATIONS = 10_000  # Monte Carlo sign flips; the p-value's standard error is ≤ 0.005 at p = 0.05
SEED = 0  # fixed: the same inputs give the same p-value on every rerun of a report
CONFIDENCE = 0.95
_CHUNK_ELEMENTS = 1 << 22  # signs per matrix product (32 MiB as float64), whatever the number of queries
MAX_EXACT_SEEDS = 16  # up to 2^16 sign patterns over seeds are enumerated; more seeds are sampled
ALPHA = 0.05
POWER = 0.8  # the power a seed plan aims for
MAX_SEEDS = 1000  # seeds_for_power searches n = 2 .. this; beyond it the answer is None


class StatsError(VtlabError):
    """Per-query inputs that cannot be paired (different query sets, no queries)."""


def paired_arrays(
    a: Mapping[str, float], b: Mapping[str, float], what: str = "the two systems"
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(query ids, a's values, b's values), paired by query id; the query sets must be equal."""
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        raise StatsError(
            f"{what}: query sets differ ({len(only_a)} only in the first, e.g. {only_a[:3]}; "
            f"{len(only_b)} only in the second, e.g. {only_b[:3]})"
        )
    if not a:
        raise StatsError(f"{what}: no queries")
    ids = sorted(a)
    return ids, np.array([a[q] for q in ids], dtype=np.float64), np.array([b[q] for q in ids], dtype=np.float64)


def mean_over_seeds(per_seed: Sequence[Mapping[str, float]], what: str = "seeds") -> dict[str, float]:
    """Per query, the mean of its value over seeds (a row with several seeds is one system); all seeds must have
    evaluated the same queries."""
    if not per_seed:
        raise StatsError(f"{what}: no seed has per-query values")
    ids = set(per_seed[0])
    for i, seed in enumerate(per_seed[1:], start=1):
        if set(seed) != ids:
            raise StatsError(
                f"{what}: seed {i} has other queries than seed 0 "
                f"({len(set(seed) ^ ids)} differ, e.g. {sorted(set(seed) ^ ids)[:3]})"
            )
    return {q: float(np.mean([seed[q] for seed in per_seed])) for q in sorted(ids)}


def randomization_test(a: np.ndarray, b: np.ndarray, n_permutations: int = N_PERMUTATIONS, seed: int = SEED) -> float:
    """Two-sided p-value of the paired sign-flip test of mean(a - b) = 0, from `n_permutations` random sign vectors.

    p = (1 + #{|mean(s·d)| ≥ |mean(d)|}) / (1 + n_permutations): counting the observed assignment keeps the Monte
    Carlo p-value valid (never 0; Phipson & Smyth 2010).
    """
    if np.ndim(a) != 1 or np.shape(a) != np.shape(b) or np.size(a) == 0:
        raise StatsError(
            f"randomization test: expected two equal-length 1-d arrays, got shapes {np.shape(a)} and {np.shape(b)}"
        )
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if n_permutations < 1:
        raise StatsError(f"randomization test: n_permutations must be >= 1, got {n_permutations}")
    observed = abs(d.sum())
    # sums of flipped signs can differ from |Σd| by rounding alone: the same assignment must count as "as extreme"
    tolerance = 1e-9 * max(float(np.abs(d).sum()), 1e-300)
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_ELEMENTS // d.size)
    extreme = 0
    for start in range(0, n_permutations, chunk):
        signs = rng.integers(0, 2, size=(min(chunk, n_permutations - start), d.size), dtype=np.int8) * 2 - 1
        extreme += int(np.count_nonzero(np.abs(signs @ d) >= observed - tolerance))
    return (1 + extreme) / (1 + n_permutations)


def t_test(a: np.ndarray, b: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(two-sided p-value, CI low, CI high) of the paired t-test of mean(a - b) = 0 (scipy.stats.ttest_rel).

    All differences zero: scipy's statistic is 0/0; the systems agree on every query, so p = 1 and the CI is [0, 0].
    One query: no variance estimate, p and CI are NaN.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if np.all(a == b):
        return 1.0, 0.0, 0.0
    if a.size < 2:
        return math.nan, math.nan, math.nan
    result = scipy_stats.ttest_rel(a, b)
    ci = result.confidence_interval(confidence)
    return float(result.pvalue), float(ci.low), float(ci.high)


@dataclass(frozen=True)
class PairedComparison:
    """System A against system B over `n` paired queries; delta = mean(A) - mean(B)."""

    n: int
    mean_a: float
    mean_b: float
    delta: float
    ci_low: float
    ci_high: float
    p_randomization: float
    p_t: float


def compare(
    a: Mapping[str, float],
    b: Mapping[str, float],
    n_permutations: int = N_PERMUTATIONS,
    seed: int = SEED,
    what: str = "the two systems",
) -> PairedComparison:
    """Both tests and the CI for per-query values {query id: value} of two systems on the same queries."""
    _, x, y = paired_arrays(a, b, what)
    p_t, low, high = t_test(x, y)
    return PairedComparison(
        n=x.size,
        mean_a=float(x.mean()),
        mean_b=float(y.mean()),
        delta=float((x - y).mean()),
        ci_low=low,
        ci_high=high,
        p_randomization=randomization_test(x, y, n_permutations, seed),
        p_t=p_t,
    )


# ---------------------------------------------------------------------------------------------------- seed level

PerSeed = Mapping[str, Mapping[str, Mapping[str, float]]]  # {seed: {set: {query id: value}}}


def seed_differences(a: PerSeed, b: PerSeed, what: str = "the two systems") -> tuple[list[str], np.ndarray]:
    """(the seeds both arms have, per such seed the mean over sets of the per-set mean difference A − B over paired
    queries): one number per training-run pair, the avg column's difference for that seed."""
    seeds = sorted(set(a) & set(b), key=lambda s: (len(s), s))  # "2" before "10"
    if not seeds:
        raise StatsError(f"{what}: no seed in common (A: {sorted(a)}, B: {sorted(b)})")
    sets = sorted(a[seeds[0]])
    per_seed = []
    for s in seeds:
        if sorted(a[s]) != sets or sorted(b[s]) != sets:
            raise StatsError(f"{what}: seed {s} has other sets than seed {seeds[0]} ({sets})")
        diffs = [np.mean(np.subtract(*paired_arrays(a[s][k], b[s][k], f"{what} on {k}, seed {s}")[1:])) for k in sets]
        per_seed.append(float(np.mean(diffs)))
    return seeds, np.array(per_seed)


def seed_sign_flip_test(
    per_seed: np.ndarray, n_permutations: int = N_PERMUTATIONS, seed: int = SEED
) -> tuple[float, bool]:
    """(two-sided p-value of mean(per_seed) = 0 under sign flips of whole seeds, whether every pattern was listed).

    scipy.stats.permutation_test with one sample flips signs; it enumerates all 2^n patterns when n_resamples ≥ 2^n
    (exact p = #{|T*| ≥ |T|} / 2^n) and otherwise samples with p = (1 + #as extreme) / (1 + n_resamples)."""
    per_seed = np.asarray(per_seed, dtype=np.float64)
    if per_seed.ndim != 1 or per_seed.size == 0:
        raise StatsError(f"seed-level test: expected a 1-d array of per-seed differences, got shape {per_seed.shape}")
    if per_seed.size == 1 or not np.any(per_seed):
        # one seed (x and its mirror −x) or no difference on any seed: every pattern is as extreme as the observed one
        # (scipy needs two observations and would compare 0 with 0)
        return 1.0, True
    exact = per_seed.size <= MAX_EXACT_SEEDS
    result = scipy_stats.permutation_test(
        (per_seed,),
        np.mean,
        permutation_type="samples",
        vectorized=True,
        alternative="two-sided",
        n_resamples=2**per_seed.size if exact else n_permutations,
        rng=np.random.default_rng(seed),
    )
    return float(result.pvalue), exact


def seed_t_test(per_seed: np.ndarray) -> float:
    """Two-sided one-sample t-test of the per-seed differences (df = n − 1): with the same queries on every seed this
    is the test of the fixed effect in the mixed model difference = δ + seed effect + query effect + noise, the seed
    the random unit. NaN where it cannot be computed (one seed; every seed the same nonzero difference); 1.0 where
    no seed differs."""
    per_seed = np.asarray(per_seed, dtype=np.float64)
    if not np.any(per_seed):
        return 1.0
    if per_seed.size < 2 or np.ptp(per_seed) == 0:
        return float("nan")
    return float(scipy_stats.ttest_1samp(per_seed, 0.0).pvalue)


def seed_t_interval(per_seed: Sequence[float] | np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """(low, high): the t interval of the mean per-seed difference, d̄ ± t_((1+confidence)/2, n−1) · s / √n, with s the
    sample standard deviation (ddof=1) of the n per-seed differences. NaN for fewer than two seeds (no spread);
    [d̄, d̄] when every seed has the same difference."""
    d = np.asarray(per_seed, dtype=np.float64)
    if d.size < 2:
        return math.nan, math.nan
    half = float(scipy_stats.t.ppf((1 + confidence) / 2, d.size - 1)) * float(d.std(ddof=1)) / math.sqrt(d.size)
    return float(d.mean()) - half, float(d.mean()) + half


def _check_power_inputs(sd: float, effect: float, alpha: float) -> None:
    if not (math.isfinite(sd) and sd > 0) or not math.isfinite(effect) or not 0 < alpha < 1:
        raise StatsError(
            f"power: needs a finite sd > 0, a finite effect and 0 < alpha < 1 (sd={sd}, effect={effect}, alpha={alpha})"
        )


def _power(n: np.ndarray, sd: float, effect: float, alpha: float) -> np.ndarray:
    """Power of the two-sided one-sample t-test at level alpha for each n in `n` (all ≥ 2): with T ~ non-central t
    (df n − 1, non-centrality δ = |effect| · √n / sd; the power does not depend on the sign) and t_crit =
    t.ppf(1 − alpha / 2, n − 1), P(T > t_crit) + P(T < −t_crit), the second as P(T' > t_crit) with T' ~ nct(−δ).

    Where δ is so large that P(T ≤ t_crit) ≤ Φ(−δ/2) + P(√(V/df) ≥ δ / (2 t_crit)) (V ~ χ²(df); T = (Z + δ) /
    √(V/df) ≤ t_crit needs Z ≤ −δ/2 or t_crit·√(V/df) ≥ δ/2) is below 1e-16, the power is 1 in double precision and
    the non-central t is not evaluated: scipy's (Boost's) series is slow there and returns NaN for some δ (≈ 6·10^4
    at df 78)."""
    df = n - 1
    crit = scipy_stats.t.ppf(1 - alpha / 2, df)
    nc = abs(effect) * np.sqrt(n) / sd
    certain = scipy_stats.norm.cdf(-nc / 2) + scipy_stats.chi2.sf(df * (nc / (2 * crit)) ** 2, df) < 1e-16
    power = np.ones(n.shape)
    if not certain.all():
        df, crit, nc = df[~certain], crit[~certain], nc[~certain]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # Boost warns where its series fails: checked below
            power[~certain] = scipy_stats.nct.sf(crit, df, nc) + scipy_stats.nct.sf(crit, df, -nc)
    if np.isnan(power).any():
        raise StatsError(
            f"power: the non-central t cannot be evaluated at n = {n[np.isnan(power)][0]} (sd={sd}, "
            f"effect={effect}, alpha={alpha})"
        )
    return power


def power_of(n: int, sd: float, effect: float, alpha: float = ALPHA) -> float:
    """The power of the two-sided one-sample (paired) t-test of n per-seed differences at level `alpha` against a
    true mean difference `effect` when the per-seed differences have standard deviation `sd` (exact, from the
    non-central t). At effect 0 it is alpha (the test's size); the sign of the effect does not matter."""
    _check_power_inputs(sd, effect, alpha)
    if n < 2:
        raise StatsError(f"power: a t-test needs n >= 2 seeds, got {n}")
    return float(_power(np.array([n]), sd, effect, alpha)[0])


def seeds_for_power(
    sd: float, effect: float, alpha: float = ALPHA, power: float = POWER, max_seeds: int = MAX_SEEDS
) -> int | None:
    """The number of matched seeds to plan for: the smallest n in 2 .. `max_seeds` at which the two-sided one-sample
    t-test of the per-seed differences at level `alpha` has power ≥ `power` against a true mean difference `effect`,
    with per-seed standard deviation `sd` (power_of). None where no n up to `max_seeds` reaches it (an effect too
    small for its spread; at effect 0 the power is alpha at every n). The power rises with n, so the first n that
    reaches it is the answer."""
    _check_power_inputs(sd, effect, alpha)
    if not 0 < power < 1 or max_seeds < 2:
        raise StatsError(f"seeds_for_power: needs 0 < power < 1 and max_seeds >= 2 (power={power}, max={max_seeds})")
    start = 2
    while start <= max_seeds:  # blocks 2-3, 4-7, 8-15, ...: the search stops near the answer, where δ is moderate
        n = np.arange(start, min(2 * start, max_seeds + 1))
        hits = np.flatnonzero(_power(n, sd, effect, alpha) >= power)
        if hits.size:
            return int(n[hits[0]])
        start *= 2
    return None


def sd_upper_bound(per_seed: Sequence[float] | np.ndarray, confidence: float = 0.8) -> float:
    """The one-sided upper `confidence` bound of the standard deviation of per-seed differences, from their sample SD
    s over n seeds: s · √((n − 1) / χ²_{1 − confidence}(n − 1)) (the chi-square interval of a normal variance). A seed
    plan built on it is less likely to be short than one built on s itself, which is as often below the true SD as
    above it when few seeds measured it."""
    d = np.asarray(per_seed, dtype=float)
    if d.size < 2 or not np.isfinite(d).all():
        raise StatsError(f"sd_upper_bound: needs at least two finite per-seed differences, got {d.tolist()}")
    if not 0 < confidence < 1:
        raise StatsError(f"sd_upper_bound: needs 0 < confidence < 1 (confidence={confidence})")
    df = d.size - 1
    return float(d.std(ddof=1)) * math.sqrt(df / float(scipy_stats.chi2.ppf(1 - confidence, df)))


@dataclass(frozen=True)
class SeedPlan:
    """The seeds a table plans for from a pilot's per-seed differences: their SD, its upper bound, and the seeds for
    `power` against `effect` at that bound (None: none up to MAX_SEEDS reaches it)."""

    per_seed: tuple[float, ...]
    sd: float
    sd_bound: float
    confidence: float
    effect: float
    alpha: float
    power: float
    seeds: int | None


def seed_plan(
    per_seed: Sequence[float],
    effect: float,
    alpha: float = ALPHA,
    power: float = POWER,
    confidence: float = 0.8,
    max_seeds: int = MAX_SEEDS,
) -> SeedPlan:
    """seeds_for_power at the upper `confidence` bound of the per-seed SD (sd_upper_bound), at least the pilot's own
    seeds."""
    d = [float(x) for x in per_seed]
    bound = sd_upper_bound(d, confidence)
    n = seeds_for_power(max(bound, 1e-12), effect, alpha, power, max_seeds)
    n = None if n is None else max(n, len(d))
    sd = float(np.std(d, ddof=1))
    return SeedPlan(tuple(d), sd, bound, confidence, float(effect), float(alpha), float(power), n)


@dataclass(frozen=True)
class SeedComparison:
    """Arm A against arm B over matched seeds; delta = mean over seeds of the per-seed avg-column difference. `p_t`
    (seed-level t, the decision test) and `p` (whole-seed sign flips, distribution-free: never below 2^(1−n))."""

    seeds: tuple[str, ...]
    per_seed: tuple[float, ...]
    delta: float
    p: float
    exact: bool
    p_t: float = float("nan")

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def ci(self) -> tuple[float, float]:
        """The 95% t interval of the mean per-seed difference (seed_t_interval)."""
        return seed_t_interval(self.per_seed)

    @property
    def min_p(self) -> float:
        """The smallest p-value n seeds can give (the observed pattern and its mirror are always as extreme)."""
        return min(1.0, 2.0 ** (1 - self.n))


def compare_seeds(
    a: PerSeed, b: PerSeed, n_permutations: int = N_PERMUTATIONS, seed: int = SEED, what: str = "the two systems"
) -> SeedComparison:
    """The seed-level test for per-seed, per-set, per-query values {seed: {set: {query id: value}}} of two arms."""
    seeds, per_seed = seed_differences(a, b, what)
    p, exact = seed_sign_flip_test(per_seed, n_permutations, seed)
    return SeedComparison(
        tuple(seeds), tuple(float(x) for x in per_seed), float(per_seed.mean()), p, exact, seed_t_test(per_seed)
    )


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values, in input order: the i-th smallest becomes
    max over j ≤ i of min(1, (m − j + 1) · p_(j)). A NaN (a contrast that could not be tested) stays NaN and still
    counts in m, so an untestable claim never makes the others easier to pass."""
    p = np.asarray(pvalues, dtype=np.float64)
    m = p.size
    order = np.argsort(np.where(np.isnan(p), np.inf, p), kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * np.nan_to_num(p[order], nan=1.0))
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled)
    adjusted[np.isnan(p)] = np.nan
    return adjusted.tolist()


@dataclass(frozen=True)
class FixedSequence:
    """The outcome of the fixed-sequence procedure: whether the primary hypothesis is rejected, and the Holm-adjusted p
    of each secondary contrast (input order), computed whether or not the secondaries were tested."""

    primary_rejected: bool
    secondary_adjusted: list[float]

    @property
    def secondary_tested(self) -> bool:
        """The secondaries are tested only behind a rejected primary."""
        return self.primary_rejected

    def secondary_rejected(self, alpha: float = ALPHA) -> list[bool]:
        """Per secondary contrast, whether it is rejected: tested, and its Holm-adjusted p below alpha."""
        return [self.secondary_tested and p < alpha for p in self.secondary_adjusted]


def fixed_sequence(primary_p: float, secondary_ps: Sequence[float], alpha: float = ALPHA) -> FixedSequence:
    """Gatekeeping over a table's contrasts: the primary hypothesis is tested first, alone, at `alpha` on its
    unadjusted p (rejected where p < alpha); only if it is rejected are the secondary hypotheses tested, with Holm
    over the secondary family at `alpha`. The family-wise error stays at alpha: where the primary's null hypothesis
    is true, every false rejection passes through rejecting it (probability ≤ alpha); where it is false, the only
    false rejections are secondary ones, which Holm holds at alpha. A NaN primary p (untestable) is not rejected.
    The secondaries' Holm-adjusted p-values are returned whether or not they were tested (a NaN stays NaN and counts
    in the family, see holm)."""
    if not 0 < alpha < 1:
        raise StatsError(f"fixed_sequence: needs 0 < alpha < 1, got {alpha}")
    rejected = bool(primary_p < alpha)  # NaN < alpha is False
    return FixedSequence(rejected, holm(secondary_ps))
