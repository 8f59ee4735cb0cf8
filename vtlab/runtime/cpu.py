"""This machine's CPU feature flags (/proc/cpuinfo), and $VTLAB_MAX_CPU_ISA: run as an older CPU kind would.

What precision `auto` may pick and which fused pooling kernel computes each precision (vtlab.runtime.precision,
vtlab.runtime.fused) follow these flags. VTLAB_MAX_CPU_ISA=avx2 hides every flag an AVX2-only CPU (AMD Zen 2/3) lacks —
AVX-512, AVX-VNNI, AMX —, =avx2_vnni all but AVX-VNNI (Intel client CPUs since Alder Lake) and =avx512 AMX (an AMD Zen
4/5 on an Intel Xeon), so one machine can measure and test what another kind of CPU would run. Torch's own kernels read
their limits when they start: `isa_env` gives the variables that hold them to the same level (ATEN_CPU_CAPABILITY,
ONEDNN_MAX_CPU_ISA, FBGEMM_ENABLE_INSTRUCTIONS, and below AVX-512 MKL_ENABLE_INSTRUCTIONS; MKL has no AMX for fp32) for
a child process (the bench's workers set them). ONNX Runtime has no such limit: it still runs at the real CPU's level.
Torch-free, so processes without torch (ONNX Runtime's bench worker) can read it.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from vtlab.core.errors import VtlabError

ISA_ENV = "VTLAB_MAX_CPU_ISA"
# level → the prefixes of the flags a CPU of that level does not list
HIDDEN = {
    "avx2": ("avx512", "avx_vnni", "avx10", "amx"),  # AMD Zen 2/3, Intel Haswell to Comet Lake
    "avx2_vnni": ("avx512", "avx10", "amx"),  # Intel client CPUs since Alder Lake: AVX-VNNI, no AVX-512
    "avx512": ("amx",),  # AMD Zen 4/5, Intel before Sapphire Rapids
}
# level → what holds torch, oneDNN and fbgemm to it (each read once, when that library starts)
LIBRARY_ENV = {
    "avx2": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    },
    "avx2_vnni": {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2_VNNI",
        "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",  # fbgemm has no AVX-VNNI kernels: its AVX2 ones run there
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    },
    "avx512": {
        "ATEN_CPU_CAPABILITY": "avx512",
        "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16",
        "FBGEMM_ENABLE_INSTRUCTIONS": "AVX512",
    },
}


def parse_cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of a /proc/cpuinfo text (its first `flags` line; x86 only, empty elsewhere)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def max_isa() -> str | None:
    """$VTLAB_MAX_CPU_ISA (None: unset or empty, the CPU as it is); a VtlabError for a level it does not know."""
    level = os.environ.get(ISA_ENV, "").strip().lower()
    if not level:
        return None
    if level not in HIDDEN:
        raise VtlabError(f"{ISA_ENV}={os.environ[ISA_ENV]!r}: expected one of {', '.join(HIDDEN)} (or unset)")
    return level


def capped(flags: frozenset[str], level: str | None) -> frozenset[str]:
    """`flags` as a CPU of `level` would list them (None: unchanged)."""
    if level is None:
        return flags
    return frozenset(f for f in flags if not f.startswith(HIDDEN[level]))


@functools.lru_cache(maxsize=1)
def own_cpu_flags() -> frozenset[str]:
    """This machine's CPU feature flags as the CPU reports them, not held to $VTLAB_MAX_CPU_ISA: what a library that
    reads cpuid itself (ONNX Runtime) runs by (empty when /proc/cpuinfo is unreadable, e.g. macOS)."""
    try:
        return parse_cpu_flags(Path("/proc/cpuinfo").read_text())
    except OSError:
        return frozenset()


@functools.lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """This machine's CPU feature flags, held to $VTLAB_MAX_CPU_ISA."""
    return capped(own_cpu_flags(), max_isa())


def isa_env(level: str | None) -> dict[str, str]:
    """The environment a child process needs to run at `level` throughout: vtlab's flags and torch's libraries."""
    return {} if level is None else {ISA_ENV: level, **LIBRARY_ENV[level]}
