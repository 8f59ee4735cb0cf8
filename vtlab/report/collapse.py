"""The collapse rule, the same for every arm of every table and fixed before any run. A seed counts as collapsed when
- the collapse detector recorded a collapse (vtlab/callbacks/collapse_detector.py: collapse.json beside the job,
  whether it stopped the training or, with action=warn, let it go on); or
- the experiment declares a floor (`report.collapse_floor: {doc_dims: <number or null>, score: <number or null>}`,
  one per table; null or absent: the detector's rule alone) and the finished seed's final values are strictly under
  it, whenever the collapse happened: `doc_dims` against its mean active dims per document (`doc_active_dims` of its
  metrics.json, mean over its collections: the "avg d dims" column), `score` against its mean of the table's measure
  over its collections (the avg column). The detector's record wins where there is one.
Either way its job's `collapse` holds the reason in one line. A collapsed seed counts — its evaluation is in the table,
and its row's status names it with the reason — and each contrast that touches one is also given without the matched
seeds where either arm collapsed, on a line of its own outside the family (no verdict): a reader sees how much one
collapsed seed moves the reading. The floor is applied where the table is built (vtlab.report.tables: it needs the
table's measure and collections); discovery reads the key and words the reasons."""

from __future__ import annotations

from collections.abc import Sequence

from vtlab.evaluation import stats
from vtlab.report.lines import FULL, ContrastLine
from vtlab.report.readings import format_p, format_signed
from vtlab.report.tables import Table

WITHOUT = "without collapsed seeds"


def collapsed_seeds(table: Table, label: str) -> set[str]:
    """The seeds of a row that collapsed: a collapse detector's record, or final values under the declared floor."""
    return {str(j.seed) for j in table.row(label).jobs if j.collapse and j.seed is not None}


def without_collapsed(table: Table, heads: Sequence[ContrastLine]) -> list[ContrastLine]:
    """For each headline line whose arms have a collapsed seed: the same seed-level comparison over the matched seeds
    where neither arm collapsed (at least two left), as a line outside the family."""
    out = []
    for head in heads:
        if head.seed is None:
            continue
        dropped = sorted(collapsed_seeds(table, head.a) | collapsed_seeds(table, head.b), key=lambda s: (len(s), s))
        kept = [(s, d) for s, d in zip(head.seed.seeds, head.seed.per_seed) if s not in dropped]
        if not dropped or len(kept) == len(head.seed.seeds):
            continue
        line = ContrastLine(head.a, head.b, head.dataset, FULL, len(kept), len(kept), None, primary=head.primary)
        line.note = f"{WITHOUT}: seed {', '.join(dropped)} left out"
        line.exploratory = True
        if len(kept) < 2:
            line.reading = f"{WITHOUT}: fewer than two matched seeds left"
        else:
            seeds, per_seed = zip(*kept)
            p, exact = stats.seed_sign_flip_test(list(per_seed))
            line.seed = stats.SeedComparison(
                tuple(seeds),
                tuple(per_seed),
                float(sum(per_seed) / len(per_seed)),
                p,
                exact,
                stats.seed_t_test(list(per_seed)),
            )
            low, high = line.seed.ci
            line.reading = (
                f"{WITHOUT} (the collapse rule, outside the family): Δ seeds {format_signed(line.seed.delta)}, 95% CI "
                f"[{format_signed(low)}, {format_signed(high)}], p seed (t) {format_p(line.seed.p_t)} over "
                f"{len(kept)} seeds"
            )
        out.append(line)
    return out
