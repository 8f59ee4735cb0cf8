"""vtlab.runtime.cpu: the CPU's flags and $VTLAB_MAX_CPU_ISA, which makes one machine run (and measure, and test) what
an older CPU kind would: its flags held to that level in vtlab, and torch's libraries held there in child processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from vtlab.core.errors import VtlabError
from vtlab.runtime import cpu

SAPPHIRE = frozenset(
    "fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 avx_vnni amx_tile amx_bf16 amx_int8".split()
)


def test_avx2_hides_what_an_avx2_only_cpu_lacks():
    assert cpu.capped(SAPPHIRE, "avx2") == {"fpu", "sse2", "avx", "avx2", "fma"}
    assert cpu.capped(SAPPHIRE, "avx2_vnni") == {"fpu", "sse2", "avx", "avx2", "fma", "avx_vnni"}
    assert cpu.capped(SAPPHIRE, "avx512") == SAPPHIRE - {"amx_tile", "amx_bf16", "amx_int8"}
    assert cpu.capped(SAPPHIRE, None) == SAPPHIRE


@pytest.mark.parametrize(("value", "level"), [("", None), ("avx2", "avx2"), (" AVX512 ", "avx512")])
def test_the_level_is_read_from_the_environment(monkeypatch, value, level):
    monkeypatch.setenv(cpu.ISA_ENV, value)
    assert cpu.max_isa() == level


def test_an_unknown_level_is_one_clear_error(monkeypatch):
    monkeypatch.setenv(cpu.ISA_ENV, "avx3")
    expected = r"^VTLAB_MAX_CPU_ISA='avx3': expected one of avx2, avx2_vnni, avx512 \(or unset\)$"
    with pytest.raises(VtlabError, match=expected):
        cpu.max_isa()


@pytest.mark.cli
def test_a_child_process_runs_at_the_level_in_vtlab_and_in_torch():
    """In a child started with isa_env("avx2"): vtlab's flags have no AVX-512 or AMX, so no fused kernel past AVX2
    is chosen, and torch's own CPU capability is AVX2 (what ATEN_CPU_CAPABILITY holds it to)."""
    code = (
        "import json, torch; from vtlab.runtime import cpu, fused; "
        "print(json.dumps({'flags': sorted(cpu.cpu_flags()), 'kernels': fused.in_use(), "
        "'torch': torch.backends.cpu.get_cpu_capability()}))"
    )
    env = {k: v for k, v in os.environ.items() if k not in cpu.LIBRARY_ENV["avx2"]}
    env.update(cpu.isa_env("avx2"))
    out = json.loads(
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    )
    assert not [f for f in out["flags"] if f.startswith(("avx512", "amx", "avx_vnni"))], out["flags"]
    assert set(out["kernels"].values()) <= {"avx2", "avx2_shuffle", None}
    assert out["kernels"]["bf16"] is None  # no bf16 kernel below AVX-512
    real = cpu.parse_cpu_flags(open("/proc/cpuinfo").read())
    assert out["torch"] == ("AVX2" if "avx2" in real else "DEFAULT")


def test_the_bench_workers_get_the_level_and_the_libraries_limits(monkeypatch):
    from vtlab.bench.common import worker_env

    monkeypatch.setenv(cpu.ISA_ENV, "avx2")
    env = worker_env(2)
    assert env[cpu.ISA_ENV] == "avx2" and env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2" and env["FBGEMM_ENABLE_INSTRUCTIONS"] == "AVX2"
    monkeypatch.delenv(cpu.ISA_ENV)
    for var in cpu.LIBRARY_ENV["avx2"]:
        monkeypatch.delenv(var, raising=False)
    assert not set(worker_env(2)) & {cpu.ISA_ENV, *cpu.LIBRARY_ENV["avx2"]}  # unset: the CPU as it is
