"""The lines of a table's contrasts: one per contrast, collection (or the pooled collections) and term budget, with
both levels of test and, on a contrast's headline line, Holm's p, the seeds to decide and the reading (filled by
vtlab.report.contrasts and vtlab.report.readings)."""

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
    primary: bool = False  # the table's declared primary contrast (report.primary)
    p_seed_holm: float | None = None  # on the contrast's headline line only (see _headline)
    reading: str = ""  # likewise, or why the line carries no verdict (exploratory)
    seeds_to_decide: int | None = None  # headline only: stats.seeds_needed over the table's Holm family
    exploratory: bool = False  # outside the Holm family (a term budget) or in an exploratory table: no verdict


@dataclass
class Contrasts:
    title: str
    measure: str
    lines: list[ContrastLine]
    footer: list[str]
