"""Retrieval evaluation, split by job:

- `retrieval`: `evaluate()` (encode, index, search, measure) and `RetrievalEvaluation`, the conf/eval object;
- `metrics`: ir_measures per query and averaged, sparsity (active dims, FLOPS);
- `budgets`: matched term budgets, re-searched after pruning;
- `outputs`: run.trec, per_query.json, metrics.json and the results table;
- `suite`: `EvaluationSuite`, several evaluations as one (BEIR-13), and `average`;
- `baseline`: `baseline_metrics`, the plain backbone's evaluation, cached per configuration (the evaluate stage's
  comparison);
- `stats`: paired significance between two systems' runs (query level and seed level, Holm), which the report's
  contrasts read.

conf/ names the classes by their module (`vtlab.evaluation.retrieval.RetrievalEvaluation`,
`vtlab.evaluation.suite.EvaluationSuite`); the names below are the public API (`stats` and `baseline` are used as
modules: `vtlab.evaluation.stats`, `vtlab.evaluation.baseline`).
"""

from vtlab.evaluation.budgets import BUDGET_KEY, Budget, budget_key, parse_budgets, prune_top_k, split_budget_key
from vtlab.evaluation.metrics import DEFAULT_MEASURES, SPARSITY_KEYS, compute_metrics, per_query_metrics, sparsity_stats
from vtlab.evaluation.outputs import TIMING_KEYS, results_table, write_outputs, write_trec_run
from vtlab.evaluation.retrieval import RetrievalEvaluation, SparseEncoder, evaluate
from vtlab.evaluation.suite import EvaluationSuite, average

__all__ = [
    "BUDGET_KEY",
    "DEFAULT_MEASURES",
    "SPARSITY_KEYS",
    "TIMING_KEYS",
    "Budget",
    "EvaluationSuite",
    "RetrievalEvaluation",
    "SparseEncoder",
    "average",
    "budget_key",
    "compute_metrics",
    "evaluate",
    "parse_budgets",
    "per_query_metrics",
    "prune_top_k",
    "results_table",
    "sparsity_stats",
    "split_budget_key",
    "write_outputs",
    "write_trec_run",
]
