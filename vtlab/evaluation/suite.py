"""Several retrieval evaluations as one (e.g. BEIR-13): each dataset into its own folder, plus their averages.

The paper reports nDCG@10 per BEIR dataset and the average; `vtlab.report` builds its tables from the per-dataset
`eval/<name>/metrics.json` files this writes, so the layout is
the same whether a run evaluates one set or thirteen.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vtlab.core.errors import VtlabError
from vtlab.core.paths import child
from vtlab.evaluation.budgets import parse_budgets

log = logging.getLogger("vtlab")


class EvaluationSuite:
    """evaluations: name → RetrievalEvaluation (anything callable as `(encoder, out_dir=...) -> metrics`).

    budgets: matched term budgets for every member (`eval.budgets=[{query: 16, doc: 64}]` once, not per dataset);
    when non-empty they replace the members' own `budgets`.
    """

    def __init__(
        self, evaluations: Mapping[str, Any], name: str = "suite", budgets: Sequence[Mapping[str, Any]] | None = None
    ) -> None:
        if not evaluations:
            raise VtlabError("eval.evaluations is empty: list at least one collection")
        self.evaluations = dict(evaluations)
        self.name = name
        parsed = parse_budgets(budgets)
        if parsed:
            for key, evaluation in self.evaluations.items():
                if not hasattr(evaluation, "budgets"):
                    raise VtlabError(
                        f"eval.budgets: eval.evaluations.{key} ({type(evaluation).__name__}) takes no budgets"
                    )
                evaluation.budgets = parsed

    def items(self) -> list[tuple[str, Any]]:
        return list(self.evaluations.items())

    def __call__(self, encoder: Any, out_dir: str | Path | None = None, **kwargs: Any) -> dict[str, dict[str, float]]:
        """{dataset: metrics}, in the configured order; each dataset writes <out_dir>/<dataset>/."""
        results: dict[str, dict[str, Any]] = {}
        for name, evaluation in self.items():
            sub = child(Path(out_dir), name, f"eval.evaluations.{name}") if out_dir is not None else None
            log.info("evaluating %s", name)
            results[name] = evaluation(encoder, out_dir=sub, **kwargs)
        return results


def average(results: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Mean of every numeric key over the datasets that report it (the paper's "avg" column)."""
    keys = {k for m in results.values() for k, v in m.items() if isinstance(v, (int, float))}
    return {k: float(np.mean([m[k] for m in results.values() if k in m])) for k in sorted(keys)}
