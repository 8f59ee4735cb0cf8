"""Is a start sparse, and does the configured APC move it toward sparse or away from it?

The sparse range: `low` ≤ mean active dims per document ≤ `high`, with
- low = `dead_below` (fewer active terms per document: a dead start, ReLU(z) = 0 and no gradient);
- high = min(`max_active_per_doc`, `dense_above` × vocabulary size): an absolute cap, because a trained SPLADE keeps a
  few hundred terms per document whatever its vocabulary size (a 250k vocabulary at 5% would allow 12,500), and a
  share, for small vocabularies.

APC is accepted only when, measured on the probe documents, it moves the mean active dims per document closer to the
range (distance in orders of magnitude, 0 inside) and does not turn a start that was not dense into a dense one. A start
already inside the range needs no calibration: APC with zeros puts (100 - percentile)% of all (document, term)
max-logits above 0, right for an MLM whose logits are all on one side of 0, thousands of dims for an already sparse
model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any


class Place(Enum):
    DEAD = "dead"
    SPARSE = "sparse"
    DENSE = "dense"


@dataclass(frozen=True)
class SparseRange:
    low: float
    high: float

    @classmethod
    def of(cls, vocab_size: int, settings: Mapping[str, Any]) -> SparseRange:
        """The range for a vocabulary of `vocab_size` entries under the verdict `settings`."""
        high = min(float(settings["max_active_per_doc"]), float(settings["dense_above"]) * vocab_size)
        return cls(float(settings["dead_below"]), high)

    def place(self, active: float) -> Place:
        if active < self.low:
            return Place.DEAD
        return Place.DENSE if active > self.high else Place.SPARSE

    def distance(self, active: float) -> float:
        """Orders of magnitude between `active` and the range (0 inside it)."""
        if active < self.low:
            return math.log10(self.low / max(active, 1e-9))  # 0 active dims: far below anything alive
        return math.log10(active / self.high) if active > self.high else 0.0

    def show(self) -> str:
        return f"{self.low:,.0f}–{self.high:,.0f} active dims per document"


@dataclass(frozen=True)
class ApcEffect:
    """The measured mean active dims per document as built and, when an APC is configured, after it."""

    apc: str
    range: SparseRange
    before: float
    after: float | None  # None: no APC configured
    after_positive_share: float | None = None

    @property
    def start(self) -> Place:
        return self.range.place(self.before)

    @property
    def accepted(self) -> bool:
        """The configured APC moves the start toward the range and does not make a start dense that was not."""
        if self.after is None or self.start is Place.SPARSE:
            return False
        closer = self.range.distance(self.after) < self.range.distance(self.before)
        densifies = self.range.place(self.after) is Place.DENSE and self.start is not Place.DENSE
        return closer and not densifies

    def as_built(self) -> str:
        return f"{self.before:,.1f} active dims per document as built"

    def change(self) -> str:
        """What the configured APC does, in numbers (empty without one)."""
        if self.after is None:
            return ""
        growth = f", {self.after / self.before:,.1f}× as many" if self.before > 0 and self.after > self.before else ""
        share = (
            f"; {self.after_positive_share:.1%} of (document, term) max-logits > 0"
            if self.after_positive_share is not None
            else ""
        )
        return f"apc={self.apc} takes it to {self.after:,.1f} ({self.range.place(self.after).value}{growth}{share})"

    def to_json(self) -> dict[str, Any]:
        return {
            "apc": self.apc,
            "low": self.range.low,
            "high": self.range.high,
            "before": self.before,
            "after": self.after,
            "start": self.start.value,
            "after_place": None if self.after is None else self.range.place(self.after).value,
            "apc_accepted": self.accepted,
        }


def apc_effect(activity: Mapping[str, Any] | None, apc: str, settings: Mapping[str, Any]) -> ApcEffect | None:
    """The effect of the configured APC (`apc`, its config name) on a probed `activity` section; None if not probed."""
    if not activity:
        return None
    after = activity.get("after")
    return ApcEffect(
        apc=apc,
        range=SparseRange.of(int(activity["vocab_size"]), settings),
        before=float(activity["before"]["mean_active_per_doc"]),
        after=None if not after else float(after["mean_active_per_doc"]),
        after_positive_share=None if not after else float(after["positive_share"]),
    )
