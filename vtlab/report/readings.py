"""What each contrast of a table may claim. With a declared primary contrast (report.primary), the fixed sequence: the
primary is tested first, alone, at ALPHA on its unadjusted seed-level t p, and only once it is rejected are the other
contrasts tested, with Holm over them (stats.fixed_sequence; the family-wise error stays at ALPHA); without one, Holm
over every contrast. The reading of each headline ("confirmed: A > B", "refuted: A < B", "undecided at N seeds" with
the seed-level 95% CI and the seeds for 80% power against the table's minimum effect of interest, or "not tested"
behind a primary that was not rejected); the checks (report.checks) reported outside the family with their numbers;
the lines at matched term budgets marked exploratory, and a table declared exploratory whose lines carry no verdict
at all (see vtlab.report.contrasts, vtlab.evaluation.stats)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from vtlab.evaluation import stats
from vtlab.report.discovery import EXPLORATORY_FILE
from vtlab.report.lines import FULL, ContrastLine
from vtlab.report.tables import DEFAULT_MIN_EFFECT

OUTSIDE_HOLM = "exploratory (outside Holm)"  # the reading of a line at a matched term budget
NOT_TESTED = "not tested: the primary was not rejected (fixed sequence)"  # a secondary behind an unrejected primary
CHECK = "check (outside the family)"  # the reading of a check's lines (its headline adds its numbers)
MARK = "†"  # beside each p-value of a line outside the family (a budget, a check) or in an exploratory table


def format_p(p: float) -> str:
    return "" if p != p else (f"{p:.4f}" if p >= 1e-4 else f"{p:.1e}")  # p != p: NaN (one query)


def format_signed(x: float) -> str:
    return "" if x != x else f"{x:+.4f}".replace("-", "−")


def _caveat(seed: stats.SeedComparison) -> str:
    """What a seed-level verdict rests on where the distribution-free sign flip cannot back it (few seeds)."""
    if seed.min_p < stats.ALPHA:
        return ""
    return (
        f" (seed-level t with {seed.n} seeds assumes normal seed differences; the sign flip cannot go "
        f"below {seed.min_p:.3g})"
    )


def _spread(seed: stats.SeedComparison) -> float:
    """The sample standard deviation (ddof=1) of the per-seed differences: the SD the seed plan assumes."""
    return float(np.std(seed.per_seed, ddof=1))


def _plan(line: ContrastLine, min_effect: float) -> str:
    """The seeds-for-power phrase of an undecided reading."""
    target = f"{stats.POWER:.0%} power for an effect of {min_effect:g} at this spread"
    if line.seeds_to_decide is not None:
        return f"about {line.seeds_to_decide} seeds give {target}"
    if line.seed is not None and _spread(line.seed) == 0:
        return "no spread between seeds to plan with"
    return f"more than {stats.MAX_SEEDS} seeds would be needed for {target}"


def plan_cell(line: ContrastLine) -> str:
    """The seeds-for-power cell: the number, "no spread" (every seed the same difference), "> MAX" beyond the
    search, empty where there is no plan (not a headline line, a check, fewer than two matched seeds)."""
    if line.seeds_to_decide is not None:
        return str(line.seeds_to_decide)
    if line.p_seed_holm is None or line.seed is None or line.seed.n < 2:
        return ""
    return "no spread" if _spread(line.seed) == 0 else f"> {stats.MAX_SEEDS}"


def _untestable(seed: stats.SeedComparison | None) -> str:
    """Why a headline line has no seed-level t p-value."""
    if seed is None:
        return ""
    if seed.n < 2:
        return f" ({seed.n} matched seed)"
    return f" ({seed.n} matched seeds, every one with the same difference: no spread for a t-test)"


def _reading(line: ContrastLine, tested: bool, min_effect: float) -> str:
    """The verdict of a headline line, read from its p_seed_holm (the p its procedure decides on). The contrast A − B
    claims A > B: "confirmed: A > B" where that p is below ALPHA with Δ seeds > 0, "refuted: A < B" where it is below
    ALPHA with Δ seeds < 0, NOT_TESTED where the fixed sequence stopped before it (`tested` false), else "undecided at
    N seeds" with the seed-level 95% CI and the seeds for 80% power against `min_effect`."""
    seed = line.seed
    if seed is None or line.p_seed_holm is None:
        return "not testable at seed level" + _untestable(seed)
    if not tested:
        return NOT_TESTED
    if line.p_seed_holm < stats.ALPHA:
        return ("confirmed: A > B" if seed.delta > 0 else "refuted: A < B") + _caveat(seed)
    low, high = seed.ci
    text = (
        f"undecided at {seed.n} seeds: seed-level 95% CI [{format_signed(low)}, {format_signed(high)}]; "
        f"{_plan(line, min_effect)}"
    )
    if line.result is not None and line.result.p_randomization < stats.ALPHA:
        text += f"; query level alone p {format_p(line.result.p_randomization)} (models taken as fixed)"
    return text


def _check_reading(line: ContrastLine) -> str:
    """A check's headline: its numbers, no verdict (Δ seeds, the seed-level 95% CI, the unadjusted seed-level t p)."""
    seed = line.seed
    if seed is None:
        return f"{CHECK}: not testable at seed level"
    text = f"{CHECK}: Δ {format_signed(seed.delta)}"
    if seed.p_t != seed.p_t:
        return f"{text}, no seed-level t{_untestable(seed)}"
    low, high = seed.ci
    return f"{text}, seed-level 95% CI [{format_signed(low)}, {format_signed(high)}], p {format_p(seed.p_t)}"


def _p_t(line: ContrastLine) -> float:
    return line.seed.p_t if line.seed is not None else math.nan


def _decide(line: ContrastLine, p: float, plan_alpha: float, tested: bool, min_effect: float) -> None:
    """Fill a family headline: the p its verdict is read from, the seeds for 80% power at `plan_alpha` (observed
    spread, `min_effect`) and the reading."""
    line.p_seed_holm = None if p != p else p
    planned = line.seed is not None and line.p_seed_holm is not None and _spread(line.seed) > 0
    line.seeds_to_decide = stats.seeds_for_power(_spread(line.seed), min_effect, plan_alpha) if planned else None
    line.reading = _reading(line, tested, min_effect)


def adjust(heads: Sequence[ContrastLine], min_effect: float) -> None:
    """Decide the table's contrasts (one headline line each). The checks among them (ContrastLine.check) only get
    their numbers (reading CHECK: …). The others are the family: with a primary (ContrastLine.primary), the fixed
    sequence (stats.fixed_sequence: the primary alone at ALPHA on its unadjusted seed-level t p, the secondaries with
    Holm over them, tested only behind a rejected primary); without one, Holm over the family. The seeds for 80% power
    against `min_effect` at the observed spread are planned at the level each line is tested at: ALPHA for the
    primary, ALPHA / (the size of the Holm family) for the others (Bonferroni, conservative for Holm)."""
    family = [x for x in heads if not x.check]
    primary = next((x for x in family if x.primary), None)
    secondary = [x for x in family if x is not primary]
    if primary is None:
        for line, p in zip(family, stats.holm([_p_t(x) for x in family])):
            _decide(line, p, stats.ALPHA / len(family), True, min_effect)
    else:
        sequence = stats.fixed_sequence(_p_t(primary), [_p_t(x) for x in secondary])
        _decide(primary, _p_t(primary), stats.ALPHA, True, min_effect)
        for line, p in zip(secondary, sequence.secondary_adjusted):
            _decide(line, p, stats.ALPHA / len(secondary), sequence.secondary_tested, min_effect)
    for line in heads:
        if line.check:
            line.reading = _check_reading(line)


def mark_checks(lines: Sequence[ContrastLine]) -> None:
    """Every line of a check is outside the family (its p-values marked MARK); its lines at full sparsity other than
    the headline read CHECK (the budget lines are marked by mark_exploratory)."""
    for line in lines:
        if line.check:
            line.exploratory = True
            line.reading = line.reading or (CHECK if line.budget == FULL else "")


def mark_exploratory(lines: Sequence[ContrastLine], outside: Sequence[ContrastLine], reason: str | None) -> None:
    """The lines at a matched term budget (`outside`) get no verdict and the reading OUTSIDE_HOLM; with a `reason`
    (the table is exploratory) every line gets none, its reading "exploratory: <reason>"."""
    for line in lines if reason is not None else outside:
        line.exploratory = True
        line.reading = f"exploratory: {reason}" if reason is not None else OUTSIDE_HOLM


def _procedure_note(family: int, primary: bool, headline: str) -> str:
    """The footer line on how the family's contrasts are tested."""
    where = f"on each contrast's headline line ({headline}), the only line of a contrast with a verdict"
    if not primary:
        return (
            f"p seed Holm: Holm's adjustment of p seed (t) over the table's {family} contrasts (the family; "
            f"family-wise error ≤ {stats.ALPHA}), {where}"
        )
    first = (
        f"fixed sequence (family-wise error ≤ {stats.ALPHA}), {where}: the primary contrast is tested first, alone, "
        f"at {stats.ALPHA} on its unadjusted p seed (t) (its p seed Holm column shows that p)"
    )
    others = family - 1
    if not others:
        return f"{first}; it is the table's only contrast in the family"
    return (
        f"{first}; only if it is rejected are the other {others} contrasts tested, at {stats.ALPHA} on p seed Holm, "
        f"Holm's adjustment of p seed (t) over those {others}; otherwise they get no verdict (reading "
        f'"{NOT_TESTED}"), their p seed Holm still shown'
    )


def _plan_note(family: int, primary: bool, min_effect: float, measure: str) -> str:
    """The footer line on the seeds-for-power column."""
    if not primary:
        levels = f"at level {stats.ALPHA} / {family} (Bonferroni over the table's contrasts, conservative for Holm)"
    elif family > 1:
        levels = (
            f"at level {stats.ALPHA} for the primary and {stats.ALPHA} / {family - 1} for the other contrasts "
            "(Bonferroni over their Holm family, conservative for Holm)"
        )
    else:
        levels = f"at level {stats.ALPHA} (the primary alone)"
    return (
        f"seeds to decide: the seeds for {stats.POWER:.0%} power, the smallest n ≥ 2 (searched up to "
        f"{stats.MAX_SEEDS}) at which the two-sided one-sample t-test of n per-seed differences has power ≥ "
        f"{stats.POWER} against a true mean difference of {min_effect:g} {measure} (the minimum effect of interest: "
        f"report.min_effect, {DEFAULT_MIN_EFFECT:g} where none is declared) when the per-seed differences have the "
        "contrast's observed SD (sample std, "
        "ddof=1, of its per-seed differences); exact, from the non-central t (df n − 1, non-centrality "
        f"{min_effect:g} · √n / SD); {levels}; a planning figure, not a test"
    )


def verdict_notes(
    family: int, primary: bool, headline: str, exploratory: str | None, min_effect: float, measure: str, checks: int
) -> list[str]:
    """The footer lines on the testing procedure (`family` contrasts, the first in a fixed sequence where there is a
    `primary`), the readings, the seeds for power and the `checks` (`headline`: which line of a contrast is its
    headline). An exploratory table's omit the readings: no line carries one (its first footer line,
    exploratory_note, says so)."""
    notes = []
    if family:
        notes += [_procedure_note(family, primary, headline)]
        if exploratory is None:
            notes.append(
                'reading (a contrast A − B claims A > B): "confirmed: A > B" where the contrast is rejected (p seed '
                f'Holm < {stats.ALPHA}, tested as above) and Δ seeds > 0, "refuted: A < B" where it is rejected and '
                'Δ seeds < 0, otherwise "undecided at N seeds" (N matched seeds) with the seed-level 95% CI of the '
                "mean per-seed difference (t interval, df = N − 1) and the seeds for 80% power: a result that is not "
                "significant is a difference not detected, not one shown absent"
            )
        notes.append(_plan_note(family, primary, min_effect, measure))
    if checks:
        notes.append(
            f"{CHECK}: the contrasts of report.checks ({checks} here; A/A and equivalence checks), never in the "
            f"family and never given a verdict; on the headline line Δ seeds, its seed-level 95% CI and the unadjusted "
            f"p seed (t); every p-value of a check marked {MARK}"
        )
    return notes


def exploratory_note(reason: str) -> str:
    """The first footer line of an exploratory table."""
    return (
        f"EXPLORATORY TABLE ({EXPLORATORY_FILE} in the sweep): {reason}; no line carries a verdict (reading "
        f'"exploratory: …"), the numbers are shown and every p-value is marked {MARK}'
    )


def budget_note(exploratory: str | None) -> str:
    """The footer's word on the lines at a matched term budget."""
    reading = f' (reading "{OUTSIDE_HOLM}")' if exploratory is None else ""
    return (
        f"The budget lines are exploratory, outside the Holm family: no verdict{reading}, their p-values unadjusted "
        f"and marked {MARK}"
    )
