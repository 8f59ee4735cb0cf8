"""A distillation teacher that mixes vocabularies: the scores of several teachers (SPLADE-tiny on bert-base-uncased
WordPiece, e5-small as a dense retriever, ...) combined as the VT authors' score wrapper combines them. With the
default two it is half SPLADE-tiny, whose vocabulary is the WordPiece VT moves onto: less favour to that arm than
SPLADE-tiny alone, not none.

Per example, each teacher's raw scores of its listed passages ([positive] + the whole negative pool, before the
DataModule draws from it) are min-max normalised, (s - min) / (max - min), so that no teacher's scale dominates; a
teacher that scores them all alike gives each 0.5 (`TIED`): a constant added to every passage of the example, which
moves no margin (MarginMSE) and no softmax (KL), and leaves the other teachers to decide. With a pool of one negative
the normalised scores are 0 and 1: each teacher contributes only its ranking of the pair, not how sure it is. The
normalised scores are averaged with `weights` (equal by default) and multiplied by `scale` (30, the authors'
score_scale), which puts them on the range of the student's dot products.

Each member is a single teacher as its own config builds it (a `vtlab.data.teacher.teacher_scored` partial), so its
raw scores are cached under its own settings, the same files a run with that teacher alone reads. The combined scores,
cheap to derive, are cached too, keyed by every member's settings, the weights, the scale and the normalisation."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence

from vtlab.core.errors import ConfigError, DataError
from vtlab.data import teacher
from vtlab.data.examples import TripletExample, Triplets

VERSION = "e1"  # bump when what a combined score means changes, so cached combinations are recomputed
TIED = 0.5  # the normalised score of every passage when a teacher scores an example's passages all alike
NORMALISATION = f"minmax-per-example-tied-{TIED}"  # in the cache key: a change of rule changes the key
log = logging.getLogger(__name__)

Member = Callable[[Sequence[TripletExample]], Sequence[TripletExample]]


def minmax(scores: Sequence[float]) -> list[float]:
    """`scores` mapped onto [0, 1] by (s - min) / (max - min); all equal: TIED each."""
    low, high = min(scores), max(scores)
    if high == low:
        return [TIED] * len(scores)
    return [(s - low) / (high - low) for s in scores]


def combine(
    raw: Mapping[str, Sequence[Sequence[float]]], weights: Mapping[str, float], scale: float
) -> list[list[float]]:
    """`scale` × the `weights`-weighted mean of each member's min-max normalised scores, example by example.

    raw: member → one score list per example (all members the same examples); weights: member → weight >= 0, not all
    zero (members weighted 0 may be absent from `raw`)."""
    used = {m: w for m, w in weights.items() if w > 0}
    total = sum(used.values())
    per_member = {m: [minmax(s) for s in raw[m]] for m in used}
    count = len(next(iter(per_member.values())))
    out = []
    for i in range(count):
        columns = zip(*(per_member[m][i] for m in used), strict=True)
        out.append([scale * sum(w * v for w, v in zip(used.values(), col, strict=True)) / total for col in columns])
    return out


def member_name(label: str, member: Member) -> str:
    """The cache name of a member: the `name` its `teacher_scored` partial was given (its config's `name`)."""
    name = getattr(member, "keywords", {}).get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(
            f"data.teacher.members.{label}: expected a single teacher's config (a vtlab.data.teacher.teacher_scored "
            f"partial with a name), got {member!r}",
            key=f"data.teacher.members.{label}",
        )
    return name


def member_scores(label: str, member: Member, examples: list[TripletExample]) -> list[list[float]]:
    """The member's raw scores of `examples`, one list per example as long as its [positive] + negatives."""
    scored = list(member(examples))
    if len(scored) != len(examples) or any(
        s.scores is None or len(s.scores) != 1 + len(ex.negatives) for s, ex in zip(scored, examples, strict=False)
    ):
        raise DataError(f"data.teacher.members.{label}: the teacher did not score every passage of every example")
    return [list(s.scores) for s in scored]


def checked_weights(labels: Sequence[str], weights: Mapping[str, float] | None) -> dict[str, float]:
    """Each member's share of the mean (summing to 1): `weights` normalised, or equal shares when None."""
    if not labels:
        raise ConfigError("data.teacher.members: expected at least one teacher", key="data.teacher.members")
    given = dict.fromkeys(labels, 1.0) if weights is None else {str(k): float(v) for k, v in weights.items()}
    if set(given) != set(labels):
        raise ConfigError(
            f"data.teacher.weights: expected a weight for each member {sorted(labels)}, got {sorted(given)}",
            key="data.teacher.weights",
        )
    if any(not math.isfinite(w) or w < 0 for w in given.values()) or sum(given.values()) <= 0:
        raise ConfigError(
            f"data.teacher.weights={given}: expected finite weights >= 0, not all 0", key="data.teacher.weights"
        )
    total = sum(given.values())
    return {m: given[m] / total for m in labels}


def ensemble_scored(
    examples: Sequence[TripletExample],
    members: Mapping[str, Member],
    weights: Mapping[str, float] | None = None,
    scale: float = 30.0,
) -> Triplets:
    """`examples` with their `scores` replaced by the members' combined scores (module docstring). `members`: label →
    a single teacher (a `teacher_scored` partial, run only when neither the combination nor its own scores are
    cached); `weights`: label → weight (None: equal); `scale`: the factor on the weighted mean."""
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ConfigError(f"data.teacher.scale={scale!r}: expected a number > 0", key="data.teacher.scale")
    shares = checked_weights(list(members), weights)
    names = {label: member_name(label, m) for label, m in members.items()}
    spec = {
        "members": members,
        "weights": shares,
        "scale": float(scale),
        "normalisation": NORMALISATION,
        "version": VERSION,
    }
    source = getattr(examples, "source", None)
    examples = list(examples)
    path = teacher.score_file("ensemble", examples, spec)

    def compute() -> list[list[float]]:
        used = [label for label in shares if shares[label]]
        raw = {}
        for i, label in enumerate(used, 1):
            log.info("ensemble teacher: member %d/%d, %s", i, len(used), names[label])
            raw[label] = member_scores(label, members[label], examples)
        return combine(raw, shares, float(scale))

    scores = teacher.cached_scores(path, examples, compute)
    log.info("ensemble teacher %s → %s", ", ".join(f"{names[m]} × {w:.3g}" for m, w in shares.items()), path)
    return teacher.with_scores(examples, scores, source)
