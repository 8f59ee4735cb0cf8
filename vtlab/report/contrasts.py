"""Paired contrasts between rows of a table: per collection, pooled and at each term budget; query level (per-query
values, sign-flip and t-test) beside seed level (matched seeds, t and sign-flip); the family's procedure (the fixed
sequence behind a declared primary, else Holm), the seeds for 80% power and the reading of each contrast's headline
line, and the checks reported outside the family (vtlab.report.readings; see vtlab.report, vtlab.evaluation.stats)."""

from __future__ import annotations

from collections.abc import Sequence

from vtlab.evaluation import split_budget_key, stats
from vtlab.report.collapse import without_collapsed
from vtlab.report.discovery import ReportError, State
from vtlab.report.lines import FULL, POOLED, ContrastLine, Contrasts
from vtlab.report.readings import adjust, budget_note, exploratory_note, mark_checks, mark_exploratory, verdict_notes
from vtlab.report.tables import Row, Table, _seeds, add_contrast


def _key(measure: str, budget: str) -> str:
    return measure if budget == FULL else f"{measure}@{budget}"


def _budgets(rows: Sequence[Row], measure: str) -> list[str]:
    """Budget labels of `measure` that any finished job of the rows evaluated, in the order the runs list them."""
    labels = [
        split_budget_key(k)[1]
        for r in rows
        for j in r.jobs
        if j.state is State.DONE
        for m in j.metrics.values()
        for k in m
        if split_budget_key(k)[0] == measure
    ]
    return list(dict.fromkeys(b for b in labels if b is not None))


def _row_per_seed(row: Row, dataset: str, key: str) -> tuple[dict[str, dict[str, float]] | None, str]:
    """({seed: per-query values of `key` on `dataset`}, why not when None)."""
    per_seed = {}
    for seed_jobs in _seeds(row.jobs):
        jobs = [j for j in seed_jobs if dataset in j.metrics]
        found = [pq[key] for j in jobs if (pq := j.per_query(dataset)) is not None and key in pq]
        if len(found) != len(jobs):  # a subset of the seeds would be another system than the table's cell
            return (
                None,
                f"{row.label}: no per-query {key} on {dataset} for seed {jobs[0].seed} (per_query.json "
                f"missing or without this key: a run from before per-query metrics, or another budget)",
            )
        if found:  # the same collection evaluated twice for one seed is averaged, as in the table
            label = seed_jobs[0].seed if seed_jobs[0].seed is not None else f"job{seed_jobs[0].num}"
            per_seed[label] = stats.mean_over_seeds(found, what=f"{row.label} seed {jobs[0].seed} on {dataset}")
    if not per_seed:
        return None, f"{row.label}: no finished run on {dataset}"
    return per_seed, ""


def _by_seed(per_set: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, dict[str, float]]]:
    """{set: {seed: values}} -> {seed: {set: values}} for the seeds present on every set."""
    seeds = set.intersection(*(set(v) for v in per_set.values())) if per_set else set()
    return {s: {d: per_set[d][s] for d in per_set} for s in seeds}


def _seed_level(
    table: Table,
    a: str,
    b: str,
    per_set_a: dict[str, dict[str, dict[str, float]]],
    per_set_b: dict[str, dict[str, dict[str, float]]],
    n_permutations: int,
) -> tuple[stats.SeedComparison | None, str]:
    """The seed-level comparison over the given sets (None and why when the rows share no seed)."""
    by_a, by_b = _by_seed(per_set_a), _by_seed(per_set_b)
    if not set(by_a) & set(by_b):
        return None, f"seed level: no seed in common ({', '.join(sorted(by_a))} vs {', '.join(sorted(by_b))})"
    try:
        return stats.compare_seeds(by_a, by_b, n_permutations, what=f"{a} vs {b}"), ""
    except stats.StatsError as exc:
        raise ReportError(f"{table.sweep}: contrast {exc}") from exc


def _contrast_lines(table: Table, a: str, b: str, budget: str, n_permutations: int) -> list[ContrastLine]:
    """One contrast at one budget: a line per collection, and the pooled line when there are several."""
    pair = (table.row(a), table.row(b))
    key = _key(table.measure, budget)
    per_set: dict[str, tuple[dict, dict]] = {}  # collection -> ({seed: values} of A, of B)
    lines, missing = [], []
    for dataset in table.datasets:
        try:
            (sa, why_a), (sb, why_b) = (_row_per_seed(r, dataset, key) for r in pair)
            va, vb = (
                stats.mean_over_seeds(list(x.values()), what=f"{r.label} on {dataset}") if x else None
                for x, r in ((sa, pair[0]), (sb, pair[1]))
            )
        except stats.StatsError as exc:  # a row's seeds evaluated different queries
            raise ReportError(f"{table.sweep}: contrast {a} vs {b}: {exc}") from exc
        line = ContrastLine(
            a, b, dataset, budget, len(sa or ()), len(sb or ()), None, "; ".join(w for w in (why_a, why_b) if w)
        )
        if va is not None and vb is not None:
            per_set[dataset] = (sa, sb)
            line.result = _compare(table, a, b, dataset, va, vb, n_permutations)
            line.seed, why = _seed_level(table, a, b, {dataset: sa}, {dataset: sb}, n_permutations)
            line.note = "; ".join(w for w in (line.note, why) if w)
        else:
            missing.append(dataset)
        lines.append(line)
    if len(table.datasets) > 1:
        lines.append(_pooled_line(table, a, b, budget, per_set, missing, n_permutations))
    return lines


def _pooled_line(
    table: Table,
    a: str,
    b: str,
    budget: str,
    per_set: dict[str, tuple[dict, dict]],
    missing: list[str],
    n_permutations: int,
) -> ContrastLine:
    """Query level: every collection's queries as one sample; seed level: stratified by collection (the avg column)."""
    line = ContrastLine(
        a,
        b,
        POOLED,
        budget,
        min((len(sa) for sa, _ in per_set.values()), default=0),
        min((len(sb) for _, sb in per_set.values()), default=0),
        None,
    )
    if missing:
        line.note = f"not pooled: no per-query values on {', '.join(missing)}"
        return line
    means = {d: tuple(stats.mean_over_seeds(list(x.values())) for x in pair) for d, pair in per_set.items()}
    pooled_a = {f"{d}/{q}": v for d, (va, _) in means.items() for q, v in va.items()}
    pooled_b = {f"{d}/{q}": v for d, (_, vb) in means.items() for q, v in vb.items()}
    line.result = _compare(table, a, b, POOLED, pooled_a, pooled_b, n_permutations)
    line.seed, line.note = _seed_level(
        table,
        a,
        b,
        {d: sa for d, (sa, _) in per_set.items()},
        {d: sb for d, (_, sb) in per_set.items()},
        n_permutations,
    )
    return line


def _headline(lines: Sequence[ContrastLine], n_datasets: int) -> ContrastLine | None:
    """The line that stands for a contrast's claim: the average over collections (pooled), at full sparsity."""
    want = POOLED if n_datasets > 1 else None
    return next((x for x in lines if x.budget == FULL and (want is None or x.dataset == want)), None)


def build_contrasts(table: Table, n_permutations: int = stats.N_PERMUTATIONS) -> Contrasts | None:
    """The table's contrasts, then its checks (None without any): per collection, pooled, at full sparsity and each
    budget; both levels of test on every line; on each contrast's headline line its adjusted p, the seeds for 80%
    power and the reading (readings.adjust), a check's lines marked outside the family; the budget lines marked
    exploratory, and every line when the table is (Table.exploratory)."""
    if not table.contrasts and not table.checks and not table.problems:
        return None
    lines: list[ContrastLine] = []
    heads: list[ContrastLine] = []
    asked = [(a, b, False) for a, b, _ in table.contrasts] + [(a, b, True) for a, b, _ in table.checks]
    for a, b, check in asked:
        mine = [
            x
            for budget in [FULL, *_budgets((table.row(a), table.row(b)), table.measure)]
            for x in _contrast_lines(table, a, b, budget, n_permutations)
        ]
        for x in mine:
            x.primary, x.check = (a, b) == table.primary, check
        head = _headline(mine, len(table.datasets))
        heads += [head] if head is not None else []
        lines += mine
    adjust(heads, table.min_effect)
    lines += without_collapsed(table, [h for h in heads if not h.check])
    mark_checks(lines)
    mark_exploratory(lines, [x for x in lines if x.budget != FULL], table.exploratory)
    footer = _contrast_footer(table, n_permutations, any(x.budget != FULL for x in lines))
    return Contrasts(f"contrasts: {table.title}", table.measure, lines, footer)


def _contrast_footer(table: Table, n_permutations: int, budgets: bool) -> list[str]:
    footer = [
        f"query level — per-query {table.measure} of a row: the mean over its seeds; queries paired by id (both rows "
        "must have evaluated the same queries); the models are taken as fixed, so these p-values cover the sampling "
        "of queries, not the variation between training runs",
        f"Δ = mean(A) − mean(B); 95% CI: paired t interval of the mean difference; p query (sign-flip): two-sided "
        f"paired sign-flip test over queries, {n_permutations:,} random sign vectors, seed {stats.SEED}, p = (1 + #as "
        f"extreme) / (1 + {n_permutations:,}); p query (t): two-sided paired t-test (scipy.stats.ttest_rel)",
        f"seed level — seed i of A matched with seed i of B (matched: how many); Δ seeds: per matched seed the mean "
        f"over collections of the per-collection mean difference (the avg column's difference), averaged over seeds; "
        "p seed (t): two-sided one-sample t-test of the per-seed differences, df = seeds − 1 (the mixed model's test "
        "of the fixed effect, seeds random), the decision test; "
        f"p seed (sign-flip): two-sided, the sign of each seed's whole difference flipped, every pattern enumerated up "
        f"to {stats.MAX_EXACT_SEEDS} seeds (n seeds cannot give p < 2/2^n: 3 seeds 0.25), sampled beyond "
        f"({n_permutations:,} patterns), the distribution-free check",
        *verdict_notes(
            len(table.contrasts),
            table.primary is not None,
            f"{POOLED if len(table.datasets) > 1 else 'its collection'}, {FULL}",
            table.exploratory,
            table.min_effect,
            table.measure,
            len(table.checks),
        ),
    ]
    if table.primary is not None:
        footer.append(
            f"(primary): the contrast the experiment config declares primary (report.primary: "
            f"{table.primary[0]} − {table.primary[1]}), decided before the runs; first in the fixed sequence, tested "
            f"alone on its unadjusted p seed (t)"
        )
    if len(table.datasets) > 1:
        footer.append(
            f"{POOLED}: query level, the queries of every collection as one sample, each query weighing the "
            "same (a query-weighted Δ); seed level, stratified by collection (Δ seeds is the avg column's)"
        )
    if budgets:
        footer.append(
            "budget qK-dK: every query (doc) pruned to its K largest weights after encoding, then searched "
            f"again (eval.budgets); {FULL}: each run's own sparsity. {budget_note(table.exploratory)}"
        )
    footer += [f"not computed: {p}" for p in table.problems]
    return footer if table.exploratory is None else [exploratory_note(table.exploratory), *footer]


def _compare(
    table: Table, a: str, b: str, dataset: str, va: dict[str, float], vb: dict[str, float], n_permutations: int
) -> stats.PairedComparison:
    try:
        return stats.compare(va, vb, n_permutations=n_permutations, what=f"{a} vs {b} on {dataset}")
    except stats.StatsError as exc:
        raise ReportError(f"{table.sweep}: contrast {exc}") from exc


def _split_contrast(text: str, labels: set[str]) -> tuple[str, str]:
    """`A,B` -> (A, B); a label may itself hold a comma (`lr=1,2`): the split whose two sides are both row labels."""
    splits = [(text[:i], text[i + 1 :]) for i, c in enumerate(text) if c == ","]
    known = [(a, b) for a, b in splits if a in labels and b in labels]
    if len(known) == 1:
        return known[0]
    if len(splits) == 1:
        return splits[0]
    raise ReportError(f"--contrast {text!r}: expected two row labels as A,B")


def add_cli_contrast(tables: Sequence[Table], text: str) -> None:
    """`--contrast A,B`: added to every table that has both rows (several sweeps: the ones it concerns)."""
    a, b = _split_contrast(text, {r.label for t in tables for r in t.rows})
    hits = [t for t in tables if {a, b} <= {r.label for r in t.rows}]
    if not hits:
        rows = "; ".join(f"{t.sweep}: {', '.join(r.label for r in t.rows)}" for t in tables)
        raise ReportError(f"--contrast {text!r}: no table has both rows {a!r} and {b!r} (rows: {rows})")
    for table in hits:
        add_contrast(table, a, b, f"--contrast {text!r}")
