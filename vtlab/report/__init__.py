"""`python -m vtlab.report SWEEP_DIR [SWEEP_DIR ...]`: the paper's tables from finished Hydra sweeps;
`python -m vtlab.report RUN_DIR RUN_DIR [...]`: finished single runs side by side (see the end).

Per sweep: rows = table rows (jobs whose overrides differ only in `seed=` — or in the collection, `eval=`,
`eval.path=`, `eval.name=` — are one row), columns = one measure per evaluated collection (nDCG@10 by default,
`--measure`), its average over the collections, and the average FLOPS and query/doc active dims; each cell is the mean
± sample std (ddof=1) over seeds, with the number of seeds. Written as markdown, CSV and LaTeX
(`table.md`, `table.csv`, `table.tex` in the sweep directory or `--out DIR`); the markdown also goes to stdout.

Contrasts (`report.contrasts: [[A, B], ...]` in the sweep's experiment config, read from the jobs' recorded
.hydra/config.yaml, and `--contrast A,B`): for each pair of row labels and each collection, the pooled collections and
each matched term budget the runs evaluated (`eval.budgets`, keys `<measure>@q<K>-d<K>`), the difference of the
measure's mean with the 95% CI of the paired difference, the paired randomization p-value and the paired t-test
p-value over queries (query level: per-query values from each run's per_query.json, averaged over a row's seeds),
and beside them the seed-level randomization p-value (seed i of A matched with seed i of B, whole seeds' signs
flipped; pooled: the avg column's difference), see vtlab.evaluation.stats. Each contrast's headline line (pooled, full
sparsity) is decided by a fixed sequence: the contrast named by `report.primary` (declared before the runs) alone on
its seed-level t p, then, only if it is rejected, the others with Holm over them; `report.checks` are shown outside
the family. Each headline gets the seeds that give 80% power against `report.min_effect` at its observed spread
("seeds to decide", non-central t) and a reading: a contrast A − B claims A > B, "confirmed: A > B" or "refuted:
A < B" only where its p is below 0.05, otherwise "undecided at N seeds" with the seed-level 95% CI. Lines at a matched
term budget are outside the family: exploratory, no verdict, their p-values marked; a contrast touching a collapsed
seed is also given without it (vtlab.report.collapse). A sweep directory holding
`exploratory.json` ({"reason": "..."}, e.g. written where a learning gate failed) makes its table exploratory: the
numbers are shown, no line carries a verdict. Written to `contrasts.md` and `contrasts.csv` beside the table, and to
stdout; `tradeoff.png` plots each row's average measure against its FLOPS, one point per seed. A recorded contrast
that cannot be computed (a label that is not a row of the table) is named in contrasts.md and on stderr after
everything is written, and the exit status is 2.

Nothing is dropped: a failed job shows "failed" with its error, a job the sweep expected but that has no directory
shows "missing", a job still running (or killed: status "running" or no status.json and no metrics) "incomplete".

Expected jobs come from `multirun.yaml` expanded the way Hydra's BasicSweeper does it (`hydra.sweeper.params`, then
`hydra.overrides.task`, through Hydra's own override parser: `a,b,c`, `range()`, `choice()`; `glob()` over a config
group is listed from the sweep's own `hydra.runtime.config_sources`). When that is not possible — no multirun.yaml,
another sweeper (optuna…), a config dir that no longer exists, or an expansion that disagrees with the job directories
— the table is built from the job directories present, and its footer says so.

Run directories (each holding `.hydra/` or status.json and eval/<collection>/metrics.json, as `python -m vtlab` writes
them; two or more, never mixed with sweeps): one row per run, labelled by its `name`, with the measure and the query
and doc active dims per collection (and their averages over the collections); then each later run against the FIRST
per collection, paired by query (per_query.json: Δ, 95% CI, both paired tests, better/same/worse queries). Written
into `--out DIR` (default outputs/compare/<date>/<time>; never inside a compared run): compare.md (also printed),
compare.csv, per_query.csv and compare.png (the measure per collection, the active dims, the sorted per-query
differences).

The package, by job: vtlab.report.discovery (the sweep's jobs and their results, the expected ones from multirun.yaml),
.tables (rows, columns, cells), .lines (the contrast lines), .contrasts (paired contrasts, both levels of test),
.readings (the fixed sequence, Holm, seeds to decide, readings, exploratory lines), .collapse (the collapse rule),
.comparison (single runs side by side), .render (markdown, CSV, LaTeX), .plot (tradeoff.png, compare.png) and .cli
(the command line; `python -m vtlab.report` runs it).
"""
