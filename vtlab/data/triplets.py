"""Triplet JSONL: one {"query", "positive", "negatives", "scores"?} object per line.

Reading is strict: every malformed line raises DataError "path:lineno: what is wrong", because a silently
skipped or mis-parsed line would bias training without any visible symptom.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable
from typing import Any

from vtlab.core.atomic import atomic_write_text
from vtlab.core.errors import DataError
from vtlab.data.examples import TripletExample, Triplets
from vtlab.data.text_files import json_line, open_regular

log = logging.getLogger("vtlab")

_ALIASES = {"positive": "pos", "negatives": "negs"}


def _field(obj: dict[str, Any], name: str, where: str) -> Any:
    alias = _ALIASES.get(name)
    if alias is not None and name in obj and alias in obj:
        raise DataError(f"{where}: both '{name}' and its alias '{alias}' are present; keep one")
    if name in obj:
        return obj[name]
    return obj.get(alias) if alias is not None else None


def _text(value: Any, name: str, where: str) -> str:
    if value is None:
        raise DataError(f"{where}: missing field '{name}' (expected a non-empty string)")
    if not isinstance(value, str):
        raise DataError(f"{where}: field '{name}' must be a string, got {type(value).__name__}")
    if not value.strip():
        raise DataError(f"{where}: field '{name}' is an empty string (expected non-empty text)")
    return value


def _opt_id(value: Any, name: str, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(f"{where}: field '{name}' must be a string id, got {type(value).__name__}")
    return str(value)


def check_scores(scores: Any, n_negatives: int, where: str, field: str | None = "scores") -> list[float]:
    """Teacher scores aligned with [positive] + negatives: a list of 1 + n finite numbers.

    field: the JSON field holding them (inline scores), or None for a line of a separate teacher-score file."""
    whole = f"field '{field}'" if field else "the score list"

    def item(i: int) -> str:
        return f"field '{field}[{i}]'" if field else f"score [{i}]"

    if not isinstance(scores, list):
        raise DataError(f"{where}: {whole} must be a list of numbers, got {type(scores).__name__}")
    if len(scores) != 1 + n_negatives:
        raise DataError(
            f"{where}: {whole} has {len(scores)} values, expected {1 + n_negatives} "
            f"(1 positive + {n_negatives} negatives)"
        )
    for i, s in enumerate(scores):
        if isinstance(s, bool) or not isinstance(s, (int, float)):
            raise DataError(f"{where}: {item(i)} must be a number, got {type(s).__name__}")
        if not math.isfinite(s):
            raise DataError(f"{where}: {item(i)} is {s} (expected a finite number)")
    return [float(s) for s in scores]


def parse_triplet(obj: Any, where: str, require_scores: bool = False) -> TripletExample:
    """Validate one decoded JSON value; `where` ("path:lineno") prefixes every error."""
    if not isinstance(obj, dict):
        raise DataError(
            f"{where}: expected a JSON object with 'query', 'positive', 'negatives', got {type(obj).__name__}"
        )
    query = _text(_field(obj, "query", where), "query", where)
    positive = _text(_field(obj, "positive", where), "positive", where)
    negs = _field(obj, "negatives", where)
    if negs is None:
        raise DataError(f"{where}: missing field 'negatives' (expected a non-empty list of strings)")
    if not isinstance(negs, list):
        raise DataError(f"{where}: field 'negatives' must be a list of strings, got {type(negs).__name__}")
    if not negs:
        raise DataError(f"{where}: field 'negatives' is empty (expected at least one negative passage)")
    negatives = [_text(n, f"negatives[{i}]", where) for i, n in enumerate(negs)]
    if positive in negatives:
        raise DataError(f"{where}: field 'negatives[{negatives.index(positive)}]' equals the positive passage")

    scores = obj.get("scores")
    if scores is None:
        if require_scores:
            raise DataError(
                f"{where}: missing field 'scores' "
                f"(required: {1 + len(negatives)} teacher scores for [positive] + negatives)"
            )
    else:
        scores = check_scores(scores, len(negatives), where)

    neg_ids = obj.get("negative_ids")
    if neg_ids is not None:
        if not isinstance(neg_ids, list) or len(neg_ids) != len(negatives):
            raise DataError(f"{where}: field 'negative_ids' must be a list of {len(negatives)} ids (one per negative)")
        neg_ids = [_opt_id(x, f"negative_ids[{i}]", where) for i, x in enumerate(neg_ids)]
    return TripletExample(
        query=query,
        positive=positive,
        negatives=negatives,
        scores=scores,
        query_id=_opt_id(obj.get("query_id"), "query_id", where),
        positive_id=_opt_id(obj.get("positive_id"), "positive_id", where),
        negative_ids=neg_ids,
    )


def _json_lines(path: str, what: str) -> list[tuple[str, Any]]:
    """("path:lineno", decoded JSON value) for every non-blank line; DataError naming the line otherwise."""
    try:
        with open_regular(path) as f:  # a named pipe is refused, not waited on
            raw = f.read()
    except OSError as e:
        raise DataError(f"{path}: cannot read {what} ({e.strerror or e})") from None
    out: list[tuple[str, Any]] = []
    # Decode per line (not the whole file) so a bad byte is reported with its line number.
    for lineno, bline in enumerate(raw.split(b"\n"), start=1):
        where = f"{path}:{lineno}"
        try:
            line = bline.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataError(f"{where}: not valid UTF-8 (byte {e.start} of the line)") from None
        if not line.strip():
            continue
        out.append((where, json_line(where, line)))
    return out


def read_jsonl_triplets(path: str, require_scores: bool = False, scores_path: str | None = None) -> Triplets:
    """Read and validate a triplet JSONL file (blank lines are skipped).

    scores_path: teacher scores in a file of their own, one JSON list per line ([positive] + negatives), aligned line
    by line (blank lines skipped) with the triplet file, e.g. cross-encoder scores computed after the triplets.
    """
    lines = _json_lines(path, "triplet file")
    if not lines:
        raise DataError(
            f"{path}: the triplet file is empty (expected one JSON object per line: "
            '{"query", "positive", "negatives", "scores"?})'
        )
    if scores_path is None:
        out = [parse_triplet(obj, where, require_scores=require_scores) for where, obj in lines]
        log.info("read %d training triplets from %s", len(out), path)
        return Triplets(out, source={"path": path})
    score_lines = _json_lines(scores_path, "teacher-score file")
    if len(score_lines) != len(lines):
        raise DataError(
            f"{scores_path}: {len(score_lines)} score lines for {len(lines)} triplets in {path} "
            "(expected one list of scores per triplet, in the same order)"
        )
    out = []
    for (where, obj), (s_where, scores) in zip(lines, score_lines):
        ex = parse_triplet(obj, where)
        if ex.scores is not None:
            raise DataError(f"{where}: has a 'scores' field and data.train.scores_path={scores_path} is set; keep one")
        ex.scores = check_scores(scores, len(ex.negatives), f"{s_where} (scores of {where})", field=None)
        out.append(ex)
    log.info("read %d training triplets from %s, teacher scores from %s", len(out), path, scores_path)
    return Triplets(out, source={"path": path, "scores_path": scores_path})


def triplet_to_dict(ex: TripletExample) -> dict[str, Any]:
    d: dict[str, Any] = {"query": ex.query, "positive": ex.positive, "negatives": list(ex.negatives)}
    for k in ("scores", "query_id", "positive_id", "negative_ids"):
        v = getattr(ex, k)
        if v is not None:
            d[k] = v
    return d


def write_jsonl_triplets(path: str | os.PathLike[str], examples: Iterable[TripletExample]) -> None:
    """Write examples as JSONL atomically (vtlab.core.atomic: a temp file renamed into place)."""
    atomic_write_text(path, (json.dumps(triplet_to_dict(ex), ensure_ascii=False) + "\n" for ex in examples))
