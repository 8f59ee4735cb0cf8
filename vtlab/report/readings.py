"""What each contrast of a table may claim: Holm over the headline lines' seed-level t, the reading of each headline
("confirmed: A > B", "refuted: A < B" or "undecided at N seeds" with the seed-level 95% CI and the seeds a decision
would take), the lines outside the Holm family (matched term budgets) marked exploratory, and a table declared
exploratory whose lines carry no verdict at all (see vtlab.report.contrasts, vtlab.evaluation.stats)."""

from __future__ import annotations

from collections.abc import Sequence

from vtlab.evaluation import stats
from vtlab.report.discovery import EXPLORATORY_FILE
from vtlab.report.lines import ContrastLine

OUTSIDE_HOLM = "exploratory (outside Holm)"  # the reading of a line at a matched term budget
MARK = "†"  # beside each p-value of a line that is outside the Holm family or in an exploratory table


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


def _plan(line: ContrastLine) -> str:
    """The seeds-to-decide phrase of an undecided reading."""
    if line.seeds_to_decide is not None:
        return f"about {line.seeds_to_decide} seeds would decide it at this spread"
    if line.seed is not None and stats.no_effect(line.seed.per_seed):
        return "no effect to detect at this spread"
    return f"more than {stats.MAX_SEEDS_NEEDED} seeds would be needed at this spread"


def plan_cell(line: ContrastLine) -> str:
    """The "seeds to decide" cell: the number, "no effect" (mean per-seed difference 0), "> MAX" beyond the search,
    empty where there is no plan (not a headline line, fewer than two matched seeds)."""
    if line.seeds_to_decide is not None:
        return str(line.seeds_to_decide)
    if line.p_seed_holm is None or line.seed is None or line.seed.n < 2:
        return ""
    return "no effect" if stats.no_effect(line.seed.per_seed) else f"> {stats.MAX_SEEDS_NEEDED}"


def _untestable(seed: stats.SeedComparison | None) -> str:
    """Why a headline line has no seed-level t p-value."""
    if seed is None:
        return ""
    if seed.n < 2:
        return f" ({seed.n} matched seed)"
    return f" ({seed.n} matched seeds, every one with the same difference: no spread for a t-test)"


def _reading(line: ContrastLine) -> str:
    """The verdict of a headline line. The contrast A − B claims A > B: "confirmed: A > B" where the Holm-adjusted
    seed-level t p is below ALPHA with Δ seeds > 0, "refuted: A < B" where it is below ALPHA with Δ seeds < 0, else
    "undecided at N seeds" with the seed-level 95% CI and the seeds that would decide it."""
    seed = line.seed
    if seed is None or line.p_seed_holm is None:
        return "not testable at seed level" + _untestable(seed)
    if line.p_seed_holm < stats.ALPHA:
        return ("confirmed: A > B" if seed.delta > 0 else "refuted: A < B") + _caveat(seed)
    low, high = seed.ci
    text = (
        f"undecided at {seed.n} seeds: seed-level 95% CI [{format_signed(low)}, {format_signed(high)}]; {_plan(line)}"
    )
    if line.result is not None and line.result.p_randomization < stats.ALPHA:
        text += f"; query level alone p {format_p(line.result.p_randomization)} (models taken as fixed)"
    return text


def adjust(heads: Sequence[ContrastLine]) -> None:
    """Holm over the table's contrasts (one headline line each, the seed-level t p), then each headline's seeds to
    decide (Bonferroni over the same family, stats.seeds_needed) and reading."""
    adjusted = stats.holm([x.seed.p_t if x.seed is not None else float("nan") for x in heads])
    for line, p in zip(heads, adjusted):
        line.p_seed_holm = None if p != p else p
        if line.seed is not None and line.p_seed_holm is not None:
            line.seeds_to_decide = stats.seeds_needed(line.seed.per_seed, len(heads))
        line.reading = _reading(line)


def mark_exploratory(lines: Sequence[ContrastLine], outside: Sequence[ContrastLine], reason: str | None) -> None:
    """The lines outside the Holm family (`outside`) get no verdict and the reading OUTSIDE_HOLM; with a `reason`
    (the table is exploratory) every line gets none, its reading "exploratory: <reason>"."""
    for line in lines if reason is not None else outside:
        line.exploratory = True
        line.reading = f"exploratory: {reason}" if reason is not None else OUTSIDE_HOLM


def verdict_notes(n_heads: int, headline: str, exploratory: str | None) -> list[str]:
    """The footer lines on Holm, the readings and the seeds to decide (`headline`: which line of a contrast is its
    headline); an exploratory table's come first and say that no line carries a verdict."""
    holm = (
        f"p seed Holm: Holm's adjustment of p seed (t) over the table's {n_heads} contrasts, on each contrast's "
        f"headline line ({headline})"
    )
    plan = (
        f"seeds to decide: the smallest number of matched seeds n ≥ 2 at which a seed-level t with the observed Δ "
        f"seeds and spread (sample std of the per-seed differences) would give p < {stats.ALPHA} / {n_heads} "
        f"(Bonferroni over the table's contrasts, the largest factor Holm can apply), searched up to "
        f"{stats.MAX_SEEDS_NEEDED}; a planning figure, not a test"
    )
    if exploratory is not None:
        return [holm, plan]
    readings = (
        f'reading: "confirmed: A > B" where p seed Holm < {stats.ALPHA} and Δ seeds > 0, "refuted: A < B" where p '
        f'seed Holm < {stats.ALPHA} and Δ seeds < 0, otherwise "undecided at N seeds" (N matched seeds) with the '
        "seed-level 95% CI of the mean per-seed difference (t interval, df = N − 1) and the seeds that would decide "
        "it: a result that is not significant is a difference not detected, not one shown absent"
    )
    return [f"{holm}, the only line with a verdict; a contrast A − B claims A > B", readings, plan]


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
