"""The testbed's sanity gates: `make reproduce-table` fails loudly (one line, exit 3) when the testbed cannot test the
paper, instead of printing tables that look like results.

- **case gate** (before any row runs): the cased-BPE model M_bpe must really handle case unlike its uncased mirrors,
  M_wp (SPLADE-tiny itself, bert-base-uncased WordPiece) and M_unc (M_bpe's OLMo BPE restricted to its lowercase
  tokens, vtlab/vocab/lowercase.py) — their vocabularies have no case variants; M_bpe's must hold them, its
  case-variant output rows must have learned to differ (mean cosine below `MAX_CASE_ROW_COSINE`; FVT starts them as
  copies, cosine 1), and document term mass must spread over case variants (at least `MIN_CASE_MASS`), which is the
  redundancy VT is meant to remove.
- **control gate** (after the main table): wp-native (SPLADE-tiny given every arm's adaptation, APC and fine-tuning,
  distilled from SPLADE-tiny's own scores: a self-distilled control) must not end below SPLADE-tiny as is (its start)
  by more than `CONTROL_TOLERANCE` on the table's average over its collections, nor on any set no selection saw
  (`control.unselected` in conf/tables/testbed.yaml: Qasper) — a control that training made worse than its start
  says the fine-tuning recipe damages models, and every arm inherits that.
- **quality gate** (after the main table): M_wp native must beat BM25 on BoolQ-clean — a testbed whose best-placed
  arm loses to BM25 in-domain measures training noise, not vocabularies.
- **learning gate** (a table's, after its selection on dev and before its seeds run; `learning_gate` in
  conf/tables/testbed.yaml): each named arm's best dev score — both arms of the primary contrast, and the cased model
  as is — must reach BM25's on the same dev split. Failing it does not stop the run: the table is reported as
  exploratory, without verdicts, and the line names each arm below and by how much. `--pilot` runs the same gate on
  dev alone, before a table spends its budget (vtlab/reproduce/pilot.py).
"""

from __future__ import annotations

import json
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from vtlab.core.errors import VtlabError
from vtlab.core.paths import CONF_DIR
from vtlab.data.clean import clean_train_passages
from vtlab.diagnose.case import case_handling

MAX_CASE_ROW_COSINE = 0.99
MIN_CASE_MASS = 0.01
CONTROL_TOLERANCE = 0.005  # average nDCG@10 that wp-native may lose against its start before the gate fails
MODELS = {"M_wp": "splade-tiny", "M_bpe": "testbed-bpe", "M_unc": "testbed-unc"}  # conf/backbone/<name>.yaml
BUILT = ("M_bpe", "M_unc")  # the models the build recipe makes (conf/mlm/testbed-build.yaml); M_wp is SPLADE-tiny
UNCASED = ("M_wp", "M_unc")  # the models whose vocabulary must have no case variants
PROBE_DOCS = 100  # clean training passages (never evaluation ones) for the mass figure
GATE_DATASET, GATE_MEASURE = "boolq-clean", "nDCG@10"


class GateError(VtlabError):
    """The testbed is broken: the message says which gate and with which numbers."""


def _backbone(name: str) -> Any:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return instantiate(compose("config", overrides=[f"backbone={name}"]).backbone)


def _build(name: str, threads: int) -> str:
    torch.set_num_threads(threads)
    _backbone(name).materialize()
    return name


def build_all(jobs: int = 2) -> None:
    """Build the testbed's relocated models (BUILT) into the cache before anything reads them, `jobs` side by side at
    one thread each (small models use a second core better as a second build than as a second thread). Built ones are
    reused."""
    names = [MODELS[label] for label in BUILT]
    if jobs <= 1:
        for name in names:
            _build(name, torch.get_num_threads())
        return
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_build, names, [1] * len(names)))


def case_report(models: dict[str, str] = MODELS) -> dict[str, dict[str, Any]]:
    """case_handling of the testbed models (label → backbone config name; built into the cache on first use) on clean
    training passages."""
    texts = list(clean_train_passages()[:PROBE_DOCS])
    out = {}
    for label, name in models.items():
        backbone = _backbone(name)
        out[label] = case_handling(backbone.load_model(), backbone.load_tokenizer(), texts)
    return out


def check_case(report: dict[str, dict[str, Any]]) -> None:
    """`report`: case_report's {"M_wp", "M_bpe", "M_unc"} (a missing model is a KeyError: the gate checks all three)."""
    for label in UNCASED:
        if (groups := report[label]["case_groups"]) != 0:
            raise GateError(
                f"case gate: {label}'s vocabulary has {groups} case-variant groups; expected an uncased "
                "vocabulary (none)"
            )
    bpe = report["M_bpe"]
    if bpe["case_groups"] == 0 or bpe["row_cosine"] is None or bpe["row_cosine"] >= MAX_CASE_ROW_COSINE:
        raise GateError(
            f"case gate: M_bpe's case variants did not learn to differ (mean row cosine "
            f"{bpe['row_cosine']} over {bpe['case_groups']} groups; expected < {MAX_CASE_ROW_COSINE}): "
            "it is not a cased model yet — build it longer (conf/mlm/testbed-build.yaml steps)"
        )
    if bpe["doc_mass_on_variants"] < MIN_CASE_MASS:
        raise GateError(
            f"case gate: M_bpe puts {bpe['doc_mass_on_variants']:.4f} of its document term mass on case "
            f"variants (expected ≥ {MIN_CASE_MASS}): no vocabulary redundancy for VT to remove"
        )


def check_quality(wp_native: float, bm25: float, where: str | Path = "the main table") -> dict[str, float]:
    """`wp_native` and `bm25`: their mean BoolQ-clean nDCG@10 (vtlab.reproduce reads them from the sweeps)."""
    if wp_native <= bm25:
        raise GateError(
            f"quality gate: wp-native scores {GATE_DATASET} {GATE_MEASURE} {wp_native:.4f}, not above "
            f"BM25's {bm25:.4f}: the testbed's fine-tuning is broken (see {where})"
        )
    return {"wp_native": wp_native, "bm25": bm25}


def check_control(
    wp_native: float, as_is: float, where: str | Path = "the main table", on: str | None = None
) -> dict[str, float]:
    """`wp_native`: wp-native's mean nDCG@10 over the table's collections (the avg column), or on the one collection
    `on` (a set no selection saw: the gate must not read only sets the recipe was tuned on); `as_is`: SPLADE-tiny's,
    unchanged (vtlab.reproduce reads both from the sweeps). wp-native starts from SPLADE-tiny and distils from its
    own scores (a self-distilled control), so ending below it means training did damage, in domain or out of it."""
    what = f"average {GATE_MEASURE}" if on is None else f"{on} {GATE_MEASURE} (a set no selection saw)"
    if wp_native < as_is - CONTROL_TOLERANCE:
        raise GateError(
            f"control gate: wp-native scores {what} {wp_native:.4f}, "
            f"{as_is - wp_native:.4f} below SPLADE-tiny as is ({as_is:.4f}; tolerance "
            f"{CONTROL_TOLERANCE}): a control that training made worse than its start (see {where})"
        )
    return {"wp_native": wp_native, "as_is": as_is}


def check_learning(
    scores: dict[str, float], reference: str, ref_score: float, spec: dict[str, Any], what: str = "the table"
) -> dict[str, Any]:
    """The learning gate of a table (before its seeds run): each gate arm's best dev score (`scores`: arm → score; the
    primary contrast's two arms and the cased model as is) must reach `reference`'s on the same dev split. A table
    whose compared arms have not learned SPLADE makes every contrast noise. Failing it says in one line which arms and
    by how much, and makes the table exploratory (no verdicts; the reason returned under "exploratory") instead of
    stopping."""
    where = f"{spec['dataset']} {spec['measure']}"
    below = {arm: score for arm, score in scores.items() if score < ref_score}
    result: dict[str, Any] = {
        "rows": dict(scores),
        "reference": reference,
        "reference_score": ref_score,
        "margins": {arm: score - ref_score for arm, score in scores.items()},
    }
    if not below:
        return {**result, "passed": True, "exploratory": None}
    gaps = ", ".join(f"{arm} {score:.4f} ({score - ref_score:+.4f})" for arm, score in below.items())
    reason = (
        f"learning gate: {gaps} on {where} at the best setting, below {reference}'s {ref_score:.4f}: the recipe's "
        f"budget does not teach {'it' if len(below) == 1 else 'them'} SPLADE; {what} has no verdicts"
    )
    print(f"vtlab: {reason}", file=sys.stderr, flush=True)
    return {**result, "passed": False, "exploratory": reason}


def write(path: Path, report: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=str))
