"""The lines of a table's contrasts: one per contrast, collection (or the pooled collections) and term budget, with
both levels of test and, on a contrast's headline line, its adjusted p (fixed sequence or Holm), the seeds for 80%
power and the reading (filled by vtlab.report.contrasts and vtlab.report.readings); a check's lines (report.checks)
carry its numbers outside the family."""

from __future__ import annotations

from dataclasses import dataclass

from vtlab.evaluation import stats

FULL = "full"  # the budget column of a contrast at each run's own sparsity (no pruning)

# The average over collections, for a contrast. Query level: the queries of every collection pooled into one paired
# sample (ids prefixed by the collection), each query weighing the same, so its Δ is a query-weighted mean and differs
# from the table's avg column (a mean of per-collection means) when the collections differ in size; pooling keeps both
# query-level tests on plain per-query differences. Seed level: stratified by collection, so its Δ is the avg
# column's.
POOLED = "all (pooled)"


@dataclass
class ContrastLine:
    a: str
    b: str
    dataset: str  # a collection or POOLED
    budget: str  # FULL or a budget label (q16-d64)
    seeds_a: int
    seeds_b: int
    result: stats.PairedComparison | None  # query level: the seeds' mean per query, paired by query
    note: str = ""
    seed: stats.SeedComparison | None = None  # seed level: matched seeds, avg-column difference
    primary: bool = False  # the table's declared primary contrast (report.primary), first in the fixed sequence
    check: bool = False  # a contrast of report.checks: reported outside the family, never a verdict
    # headline only (see _headline): the p the verdict is read from — the primary's unadjusted seed-level t p, another
    # contrast's Holm-adjusted one over its family; None on the other lines, a check's and where the t has no p
    p_seed_holm: float | None = None
    reading: str = ""  # likewise, or why the line carries no verdict (a check, exploratory)
    seeds_to_decide: int | None = None  # headline only: stats.seeds_for_power at the observed spread, min_effect
    exploratory: bool = False  # outside the family (a term budget, a check) or in an exploratory table: no verdict


@dataclass
class Contrasts:
    title: str
    measure: str
    lines: list[ContrastLine]
    footer: list[str]
