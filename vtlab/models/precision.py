"""Encoding precision: `auto` picks bf16 autocast only where the CPU computes bf16 natively, fp32 everywhere else.

Measured with `make bench` on this project's machines: bf16 autocast encoding was 2.7× faster than fp32 on an
AVX-512-bf16 CPU and ~9× slower on an AVX2-only one (oneDNN emulates bf16 there). The CPU's own feature flags
(/proc/cpuinfo `avx512_bf16`, `amx_bf16`) say which case a machine is, without a timing probe.

`VTLAB_AUTO_PRECISION=fp32|bf16` makes `auto` mean that precision whatever the CPU: the test suite runs once each way,
so a test that only passes where auto happens to pick fp32 shows up on any machine.
"""
from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from vtlab.errors import VtlabError

PRECISIONS = ("auto", "fp32", "bf16")
BF16_NATIVE_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})  # either one: bf16 matmuls in hardware
AUTO_ENV = "VTLAB_AUTO_PRECISION"


def parse_cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of a /proc/cpuinfo text (its first `flags` line; x86 only, empty elsewhere)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """This machine's CPU feature flags (empty when /proc/cpuinfo is unreadable, e.g. macOS)."""
    try:
        return parse_cpu_flags(Path("/proc/cpuinfo").read_text())
    except OSError:
        return frozenset()


def native_bf16(flags: Iterable[str]) -> bool:
    return bool(BF16_NATIVE_FLAGS & set(flags))


def resolve_precision(precision: str, device: str | torch.device = "cpu",
                      flags: Iterable[str] | None = None) -> str:
    """"fp32" or "bf16" for `precision` (auto / fp32 / bf16) on `device`; `flags`: the CPU's (default: this one's,
    where $VTLAB_AUTO_PRECISION, when set, decides instead).

    auto on a non-CPU device stays fp32 (what encoding always did there); GPUs choose via trainer.precision.
    """
    if precision not in PRECISIONS:
        raise VtlabError(f"model.encoder.precision={precision!r}: expected one of {', '.join(PRECISIONS)}")
    if precision != "auto":
        return precision
    forced = auto_override() if flags is None else None  # explicit flags ask about that CPU, not this run
    if forced is not None:
        return forced
    if torch.device(device).type != "cpu":
        return "fp32"
    return "bf16" if native_bf16(cpu_flags() if flags is None else flags) else "fp32"


def auto_override() -> str | None:
    """What $VTLAB_AUTO_PRECISION forces `auto` to (fp32 or bf16), None when unset or empty."""
    value = os.environ.get(AUTO_ENV, "").strip()
    if not value:
        return None
    if value not in ("fp32", "bf16"):
        raise VtlabError(f"{AUTO_ENV}={value!r}: expected fp32 or bf16 (or unset: auto follows the CPU)")
    return value


def autocast(precision: str, device_type: str) -> Any:
    """The context encoding runs under: bf16 autocast, or nothing (fp32 is what the weights already are)."""
    if precision == "bf16":
        return torch.autocast(device_type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
