"""Encoding precision: fp32, bf16 (autocast), int8 (vtlab.runtime.quantize), `auto`: the fastest of them that this
CPU runs natively and that holds quality, or `native`: bf16 where the CPU computes it natively, else fp32 — decided by
the CPU's flags alone, no timing, so every model on one machine is encoded alike (what a table of compared models
needs: auto's timing probe can pick int8 for one model and bf16 for the next when they run at similar speed).

- bf16: measured with `make bench` on this project's machines, bf16 encoding was 1.7× faster than fp32 on an
  AVX-512-bf16 CPU (both with fused pooling kernels; docs/kernels.md), 3.6× on an AMX one (fp32 then on torch's
  GEMM), and ~9× slower on an AVX2-only one (oneDNN emulates bf16 there). Native: `avx512_bf16`/`amx_bf16`.
- int8: native with VNNI (`avx512_vnni`, `avx_vnni`) or AMX (`amx_int8`) — int8 dot products in hardware — and with AVX2
  alone, where vtlab's fused pooling kernel multiplies u8 × s8 through vpmaddubsw (vtlab/runtime/avx2.c: 6-bit
  activations in the head; docs/kernels.md). Quantization error depends on the model's weights and activations, so
  auto takes int8 only after a check on the model itself (`choose_auto`): on probe texts the encoder is given
  (`model.encoder.probe`: 200 BoolQ *train* (question, passage) pairs, never an evaluation set), encoded in fp32 and
  in each native candidate, a candidate's vectors must agree with fp32's (`Agreement`, thresholds below) and it must
  have encoded the passages faster than fp32; the fastest such wins (`choose`), so auto is never slower than fp32. The
  check's result (agreement, speed) is cached per model weights and machine (cache_dir("precision")): a model is
  checked once, and every later run on that machine makes the same choice.
- The CPU's feature flags (/proc/cpuinfo) say which precisions are native, without a timing probe; a CPU with neither
  (no AVX2, e.g. Arm) runs fp32 with no check at all.

`VTLAB_AUTO_PRECISION=fp32|bf16|int8` makes `auto` mean that precision whatever the CPU (no check): the test suite runs
once each way, so a test that only passes where auto happens to pick fp32 shows up on any machine.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, get_args

import numpy as np
import scipy.sparse as sp
import torch

from vtlab.core.assets import cache_dir
from vtlab.core.atomic import write_json
from vtlab.core.choices import EncoderPrecision
from vtlab.core.errors import VtlabError
from vtlab.core.json_files import read_json
from vtlab.core.waiting import Waiting
from vtlab.runtime.cpu import cpu_flags, parse_cpu_flags  # noqa: F401 (parse_cpu_flags: part of this module's interface)

log = logging.getLogger("vtlab")

PRECISIONS: tuple[str, ...] = get_args(EncoderPrecision)  # declared once: vtlab.core.choices
BF16_NATIVE_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # either one: bf16 matmuls in hardware
# any one: int8 multiplies in hardware — VNNI / AMX dot products, or AVX2's vpmaddubsw (fewer activation bits there, so
# its int16 sums never saturate: vtlab.runtime.quantize, vtlab/runtime/avx2.c)
INT8_NATIVE_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8", "avx2"})
NATIVE_FLAGS: Mapping[str, frozenset[str]] = {"bf16": BF16_NATIVE_FLAGS, "int8": INT8_NATIVE_FLAGS}
AUTO_ENV = "VTLAB_AUTO_PRECISION"
FORCEABLE = ("fp32", "bf16", "int8")  # what $VTLAB_AUTO_PRECISION may say
# The order auto lists (and measures) its candidates in; without a check (int8 not native here, or not possible)
# it takes the first native one. fp32 always runs, last.
PREFERENCE = ("int8", "bf16", "fp32")

# The check's bars. Measured with SPLADE-tiny, on the probe (mean doc cosine / top-10 overlap) and on BoolQ-clean
# (nDCG@10, 2,316 questions; fp32: 0.8724):
#   bf16 autocast                                   0.99991 / 0.991   nDCG 0.8728
#   int8 (vtlab.runtime.quantize)                    0.9988  / 0.968   nDCG 0.8736
#   int8, per-tensor weight scales                  0.9971  / 0.956   nDCG 0.8716
#   int8, per-channel scales ×4  (~6-bit weights)   0.9928  / 0.940   nDCG 0.8711
#                            ×6  (~5.4-bit)         0.9870  / 0.911   nDCG 0.8701
#                            ×8  (~5-bit)           0.9747  / 0.890   nDCG 0.8713
#                            ×16 (~4-bit)           0.911   / 0.771   nDCG 0.8535  (97.8% of fp32: quality lost)
# The bars pass everything down to ~6-bit weights and stop well before 4-bit. They are conservative on purpose (the
# ~5-bit grids still held nDCG@10 here, but BoolQ's one relevant passage per question makes nDCG@10 a coarse ruler):
# mean cosine 0.99 ↔ a relative L2 error of at most √(2·(1 − 0.99)) ≈ 14% for vectors of equal norm; top-10 overlap
# 0.9 ↔ on average at most one of a question's ten results replaced.
MIN_DOC_COSINE = 0.99
MIN_TOP10_OVERLAP = 0.90
# bump when the check (probe, metrics, bars, timing) or the int8 quantization changes: cached results are then redone
CHECK_VERSION = 2  # 2: int8 on AVX2 CPUs through vtlab/runtime/avx2.c


def native(precision: str, flags: Iterable[str]) -> bool:
    """Whether a CPU with `flags` computes `precision` in hardware (fp32: always)."""
    return precision == "fp32" or bool(NATIVE_FLAGS[precision] & set(flags))


def native_bf16(flags: Iterable[str]) -> bool:
    return native("bf16", flags)


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise VtlabError(f"model.encoder.precision={precision!r}: expected one of {', '.join(PRECISIONS)}")


def auto_candidates(device: str | torch.device = "cpu", flags: Iterable[str] | None = None) -> tuple[str, ...]:
    """What `auto` may run on `device`, preferred first, fp32 last: the precisions the CPU computes natively
    (`flags`: the CPU's; default this one's, where $VTLAB_AUTO_PRECISION, when set, is the only candidate)."""
    forced = auto_override() if flags is None else None  # explicit flags ask about that CPU, not this run
    if forced is not None:
        return (forced,)
    if torch.device(device).type != "cpu":
        return (accelerator_precision(device),)
    flags = cpu_flags() if flags is None else frozenset(flags)
    return tuple(p for p in PREFERENCE if native(p, flags))


def native_precision(device: str | torch.device = "cpu", flags: Iterable[str] | None = None) -> str:
    """`native`: bf16 where `device` is a CPU whose `flags` (default this one's) compute it in hardware, else fp32; not
    changed by $VTLAB_AUTO_PRECISION (which is about `auto`)."""
    if torch.device(device).type != "cpu":
        return accelerator_precision(device)
    return "bf16" if native_bf16(cpu_flags() if flags is None else flags) else "fp32"


def accelerator_precision(device: str | torch.device) -> str:
    """What `auto` and `native` run on an accelerator: bf16 where it computes bf16 in hardware (a CUDA GPU of compute
    capability 8.0 or later: A100, H100, ...), as training does under `trainer=gpu` (bf16-mixed), else fp32."""
    cuda = torch.device(device).type == "cuda" and torch.cuda.is_available()
    return "bf16" if cuda and torch.cuda.is_bf16_supported(including_emulation=False) else "fp32"


def trainer_precision(precision: Any, accelerator: Any = "cpu", flags: Iterable[str] | None = None) -> Any:
    """`trainer.precision` as Lightning takes it: "native" is bf16-mixed where the device computes bf16 natively (a CPU
    with AVX512-BF16 or AMX, a GPU), else 32-true; any other value unchanged."""
    if precision != "native":
        return precision
    gpu = str(accelerator) in ("gpu", "cuda") or (str(accelerator) == "auto" and torch.cuda.is_available())
    return "bf16-mixed" if gpu or native_bf16(cpu_flags() if flags is None else flags) else "32-true"


def resolve_precision(precision: str, device: str | torch.device = "cpu", flags: Iterable[str] | None = None) -> str:
    """`precision` (fp32 / bf16 / int8) as given, or what `auto` runs on `device` without checking a model: the first
    of its candidates that needs no check (bf16 where native, else fp32), or what $VTLAB_AUTO_PRECISION forces.
    Where int8 is a candidate too, auto's check (vtlab.runtime.policy) may take it instead (after `int8_agrees`)."""
    check_precision(precision)
    if precision == "native":
        return native_precision(device, flags)
    if precision != "auto":
        return precision
    candidates = auto_candidates(device, flags)
    return candidates[0] if len(candidates) == 1 else next(p for p in candidates if p != "int8")


def auto_override() -> str | None:
    """What $VTLAB_AUTO_PRECISION forces `auto` to (fp32, bf16 or int8), None when unset or empty."""
    value = os.environ.get(AUTO_ENV, "").strip()
    if not value:
        return None
    if value not in FORCEABLE:
        raise VtlabError(
            f"{AUTO_ENV}={value!r}: expected {', '.join(FORCEABLE[:-1])} or {FORCEABLE[-1]} "
            f"(or unset: auto follows the CPU)"
        )
    return value


# ---------------------------------------------------------------------------------------------------- the int8 check


@dataclass(frozen=True)
class Agreement:
    """How close a precision's vectors are to fp32's on the probe (means over its passages / questions)."""

    doc_cosine: float  # cosine of each passage's vector to its fp32 vector
    top10_overlap: float  # |top-10 ∩ fp32's top-10| / 10 of each question over the probe's passages

    def holds(self) -> bool:
        return self.doc_cosine >= MIN_DOC_COSINE and self.top10_overlap >= MIN_TOP10_OVERLAP

    def words(self) -> str:
        return (
            f"doc cosine {self.doc_cosine:.4f} {'≥' if self.doc_cosine >= MIN_DOC_COSINE else '<'} "
            f"{MIN_DOC_COSINE}, top-10 overlap {self.top10_overlap:.3f} "
            f"{'≥' if self.top10_overlap >= MIN_TOP10_OVERLAP else '<'} {MIN_TOP10_OVERLAP}"
        )


def row_cosines(a: sp.csr_matrix, b: sp.csr_matrix) -> np.ndarray:
    dots = np.asarray(a.multiply(b).sum(axis=1)).ravel()
    na = np.sqrt(np.asarray(a.multiply(a).sum(axis=1)).ravel())
    nb = np.sqrt(np.asarray(b.multiply(b).sum(axis=1)).ravel())
    both_empty = (na == 0) & (nb == 0)  # two empty vectors agree; one empty one does not
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where(both_empty, 1.0, dots / np.maximum(na * nb, 1e-30))
    return cos


def top_k_overlap(ref: np.ndarray, other: np.ndarray, k: int = 10) -> float:
    """Mean over rows of |top-k of ref ∩ top-k of other| / k, for score matrices [queries, docs]."""
    k = min(k, ref.shape[1])
    if k == 0 or ref.shape[0] == 0:
        return 1.0
    top_ref = np.argsort(-ref, axis=1, kind="stable")[:, :k]
    top_other = np.argsort(-other, axis=1, kind="stable")[:, :k]
    return float(np.mean([len(set(r) & set(o)) / k for r, o in zip(top_ref, top_other)]))


def agreement(
    ref_queries: sp.csr_matrix, ref_docs: sp.csr_matrix, queries: sp.csr_matrix, docs: sp.csr_matrix
) -> Agreement:
    """A precision's vectors vs fp32's on the same probe: passage cosines, and top-10 retrieval of the questions."""
    ref_scores = (ref_queries @ ref_docs.T).toarray()
    scores = (queries @ docs.T).toarray()
    return Agreement(float(np.mean(row_cosines(ref_docs, docs))), top_k_overlap(ref_scores, scores))


@dataclass(frozen=True)
class Trial:
    """One precision on the probe: its passages' encoding speed, and (not fp32) its agreement with fp32."""

    precision: str
    docs_per_s: float
    agreement: Agreement | None = None


@dataclass(frozen=True)
class Choice:
    precision: str
    reason: str  # the one log line's words after "→ <precision>: "


def choose(candidates: tuple[str, ...], trials: Mapping[str, Trial]) -> Choice:
    """auto's decision (pure: tests fake the trials). Without trials (no check ran): the first candidate. With them
    (every candidate measured): the fastest whose vectors agree with fp32's, and only if faster than fp32 itself."""
    if not trials:
        return Choice(
            candidates[0],
            "native on this CPU, no check needed" if candidates[0] != "fp32" else "no native bf16/int8 on this device",
        )
    fp32 = trials["fp32"]
    rejected: list[str] = []
    passed = [fp32]
    for p in candidates:
        t = trials[p]
        if p == "fp32":
            continue
        if t.agreement is not None and not t.agreement.holds():
            rejected.append(f"{p} fails the check ({t.agreement.words()})")
        elif t.docs_per_s <= fp32.docs_per_s:
            rejected.append(f"{p} not faster than fp32")
        else:
            passed.append(t)
    best = max(passed, key=lambda t: t.docs_per_s)
    speeds = ", ".join(f"{p} {trials[p].docs_per_s:.1f}" for p in candidates)
    words = [f"fastest that holds quality (probe passages per CPU-second on one thread: {speeds})"]
    if best.agreement is not None:
        words.append(f"agrees with fp32 ({best.agreement.words()})")
    return Choice(best.precision, "; ".join(words + rejected))


def check_cache_path(key: str) -> Path:
    return cache_dir("precision") / f"auto-{key}.json"


def load_trials(path: Path) -> dict[str, Trial] | None:
    """Trials cached by a previous check (None when absent or unreadable: the check runs again)."""
    try:
        raw = read_json(path)
        if raw.get("version") != CHECK_VERSION:
            return None
        return {
            p: Trial(p, float(t["docs_per_s"]), Agreement(**t["agreement"]) if t.get("agreement") else None)
            for p, t in raw["trials"].items()
        }
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_trials(path: Path, trials: Mapping[str, Trial]) -> None:
    try:
        write_json(path, {"version": CHECK_VERSION, "trials": {p: asdict(t) for p, t in trials.items()}})
    except (OSError, VtlabError) as e:  # a read-only cache only costs the check next time
        log.debug("precision check not cached (%s)", e)


def choose_auto(
    candidates: tuple[str, ...],
    measure: Callable[[str], Trial],
    cache_key: str | None,
    why_not_int8: str | None = None,
    flags: Iterable[str] | None = None,
) -> Choice:
    """auto's choice for a model among `candidates` (auto_candidates). With int8 among them (and `why_not_int8`
    None: this torch runs it), the check: `measure` each candidate, fp32 first, cached under `cache_key`; else the
    first candidate. Says which and why in one log line."""
    trials: dict[str, Trial] = {}
    forced = auto_override() if flags is None else None
    if forced == "int8" and why_not_int8 is not None:
        raise VtlabError(f"{AUTO_ENV}=int8: {why_not_int8}")
    if why_not_int8 is not None:
        candidates = tuple(c for c in candidates if c != "int8") or ("fp32",)
    if "int8" in candidates and len(candidates) > 1:
        path = check_cache_path(cache_key) if cache_key else None
        cached = load_trials(path) if path else None
        if cached is not None and set(cached) == set(candidates):
            trials = cached
        else:
            log.info("choosing precision: timing %s on this model and CPU (once; the result is cached)", candidates)
            with Waiting("choosing precision", announce=False):
                trials = {p: measure(p) for p in ("fp32", *[c for c in candidates if c != "fp32"])}
            if path:
                save_trials(path, trials)
    choice = Choice(forced, f"{AUTO_ENV}={forced}") if forced else choose(candidates, trials)
    reason = choice.reason + (f"; int8 not possible: {why_not_int8}" if why_not_int8 else "")
    relevant = sorted((BF16_NATIVE_FLAGS | INT8_NATIVE_FLAGS) & set(cpu_flags() if flags is None else flags))
    log.info(
        "model.encoder.precision=auto → %s: %s (CPU: %s)",
        choice.precision,
        reason,
        ", ".join(relevant) or "no bf16/int8 flags",
    )
    return Choice(choice.precision, reason)
