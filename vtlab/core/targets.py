"""Targets a config read from a run directory may name (vtlab.export.safe_config), renamed since runs were recorded: the
dotted `_target_` a recorded config may hold -> the current one. A run directory keeps the config it ran with, so a run
from before a class moved names its old path. Readers of recorded configs replace each old name by its new one
(vtlab.export.safe_config.rename_targets) before checking them: an old name is accepted exactly when its new one is, and
nothing else is. Cache keys that hash a config hash the old names (vtlab.evaluation.baseline), so a move does not
invalidate cached results. Never drop an entry while such runs may be read."""

from __future__ import annotations

RENAMED_TARGETS: dict[str, str] = {
    "vtlab.evaluation.RetrievalEvaluation": "vtlab.evaluation.retrieval.RetrievalEvaluation",
    "vtlab.eval_suite.EvaluationSuite": "vtlab.evaluation.suite.EvaluationSuite",
}
