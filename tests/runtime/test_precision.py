"""precision=auto without a model: bf16 autocast only on CPUs that run bf16 natively (avx512_bf16 / amx_bf16 in
/proc/cpuinfo), fp32 elsewhere; the encoder applies the choice (bf16 vectors differ from fp32 ones, fp32 vectors equal
autocast-off). int8, and auto's check that may pick it: tests/runtime/test_precision_int8.py. Each precision's vectors
within a derived bound of fp32's, nDCG@10 ≥ 99.5% of fp32's, auto never slower than fp32:
tests/runtime/test_precision_quality.py."""

import numpy as np
import pytest
import torch

from vtlab.backbones import Backbone
from vtlab.core.errors import VtlabError
from vtlab.models.encoder import SpladeEncoder
from vtlab.runtime import cpu
from vtlab.runtime import precision as prec

AVX2_ONLY = """processor\t: 0
model name\t: AMD EPYC
flags\t\t: fpu vme sse sse2 avx avx2 fma bmi2
"""
SAPPHIRE = """processor\t: 0
flags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_bf16 amx_tile amx_bf16 amx_int8
"""
ZEN4 = "flags\t\t: sse2 avx2 avx512f avx512_bf16\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd bf16\n"  # no x86 `flags` line: no native-bf16 claim
# auto without its int8 check: native bf16 and no int8 multiply at all (hypothetical: every bf16 CPU has AVX2), and
# neither (an x86 CPU before AVX2)
BF16_NO_INT8 = "flags\t\t: sse2 avx512f avx512_bf16\n"
NO_AVX2 = "flags\t\t: fpu sse2 sse4_2 avx\n"


@pytest.mark.parametrize(
    "cpuinfo, expected", [(AVX2_ONLY, "fp32"), (SAPPHIRE, "bf16"), (ZEN4, "bf16"), (ARM, "fp32"), ("", "fp32")]
)
def test_auto_picks_bf16_only_with_native_bf16_flags(cpuinfo, expected):
    flags = prec.parse_cpu_flags(cpuinfo)
    assert prec.resolve_precision("auto", "cpu", flags=flags) == expected


def test_flag_parsing_is_whole_words():
    # "avx512_bf16" must not be found inside another flag name, nor "bf16" alone count
    assert not prec.native_bf16(prec.parse_cpu_flags("flags : avx512_bf16x bf16 avx2\n"))
    assert prec.parse_cpu_flags(SAPPHIRE) >= {"avx512_bf16", "amx_bf16", "avx2"}


def test_explicit_choices_and_devices():
    flags = prec.parse_cpu_flags(AVX2_ONLY)
    assert prec.resolve_precision("bf16", "cpu", flags=flags) == "bf16"  # asked for: honoured
    assert prec.resolve_precision("fp32", "cpu", flags=prec.parse_cpu_flags(SAPPHIRE)) == "fp32"
    assert prec.resolve_precision("auto", "cuda", flags=prec.parse_cpu_flags(SAPPHIRE)) == "fp32"
    with pytest.raises(
        VtlabError, match=r"model.encoder.precision='fp16': expected one of auto, native, fp32, bf16, int8"
    ):
        prec.resolve_precision("fp16")


def test_this_machine_follows_its_cpuinfo(monkeypatch):
    monkeypatch.delenv(prec.AUTO_ENV, raising=False)
    with open("/proc/cpuinfo") as f:
        words = cpu.capped(frozenset(f.read().split()), cpu.max_isa())  # as $VTLAB_MAX_CPU_ISA, when set, holds it
    native = bool({"avx512_bf16", "amx_bf16"} & words)
    assert prec.resolve_precision("auto") == ("bf16" if native else "fp32")


@pytest.mark.parametrize("forced", ["fp32", "bf16", "int8"])
def test_env_forces_what_auto_means(monkeypatch, forced):
    """$VTLAB_AUTO_PRECISION decides auto on this machine (the suite runs once each way); asked-for precisions and
    questions about another CPU's flags are not affected."""
    monkeypatch.setenv(prec.AUTO_ENV, forced)
    assert prec.resolve_precision("auto") == forced
    other = "bf16" if forced == "fp32" else "fp32"
    assert prec.resolve_precision(other) == other
    assert prec.resolve_precision("auto", flags=prec.parse_cpu_flags(SAPPHIRE)) == "bf16"
    monkeypatch.setenv(prec.AUTO_ENV, "fp16")
    with pytest.raises(VtlabError, match=r"VTLAB_AUTO_PRECISION='fp16': expected fp32, bf16 or int8"):
        prec.resolve_precision("auto")


@pytest.fixture(scope="module")
def splade_tiny():
    b = Backbone("asset:splade-tiny")
    return b.load_model(), b.load_tokenizer()


def test_encoder_applies_the_resolved_precision(splade_tiny, monkeypatch):
    monkeypatch.delenv(prec.AUTO_ENV, raising=False)  # auto must follow the faked CPU below, not the suite's override
    texts = ["the cat sat on the mat", "a dog", "vocabulary transfer for sparse retrieval"]
    enc = SpladeEncoder(*splade_tiny, precision="fp32")
    fp32 = enc.encode(texts, show_progress=False).toarray()
    # the reference for bf16: the fp32 encoder run inside torch's own bf16 autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        reference = enc.encode(texts, show_progress=False).toarray()
    enc.precision = "bf16"
    bf16 = enc.encode(texts, show_progress=False).toarray()
    np.testing.assert_array_equal(bf16, reference)
    assert np.abs(bf16 - fp32).max() > 0  # bf16 really ran (else the auto checks below could not tell)
    # auto follows the (faked) CPU: native bf16 (no int8: no check) → the bf16 vectors, neither → the fp32 ones
    enc.precision = "auto"
    monkeypatch.setattr(enc.policy, "_probe_trial", lambda *a: pytest.fail("no int8 candidate: nothing to measure"))
    monkeypatch.setattr(prec, "cpu_flags", lambda: prec.parse_cpu_flags(BF16_NO_INT8))
    np.testing.assert_array_equal(enc.encode(texts, show_progress=False).toarray(), bf16)
    monkeypatch.setattr(prec, "cpu_flags", lambda: prec.parse_cpu_flags(NO_AVX2))
    np.testing.assert_array_equal(enc.encode(texts, show_progress=False).toarray(), fp32)


@pytest.mark.parametrize("cpuinfo, expected", [(AVX2_ONLY, "fp32"), (SAPPHIRE, "bf16"), (ZEN4, "bf16"), (ARM, "fp32")])
def test_native_follows_the_cpu_flags_alone(monkeypatch, cpuinfo, expected):
    """`native` never times anything and never takes int8 (SAPPHIRE has amx_int8), and $VTLAB_AUTO_PRECISION, which
    is about auto, does not move it: every model on one machine is encoded alike."""
    flags = prec.parse_cpu_flags(cpuinfo)
    for forced in ("int8", "fp32", "bf16"):
        monkeypatch.setenv(prec.AUTO_ENV, forced)
        assert prec.resolve_precision("native", "cpu", flags=flags) == expected
    assert prec.resolve_precision("native", "cuda", flags=flags) == "fp32"


def test_encoder_with_native_encodes_as_the_flags_say(splade_tiny, monkeypatch):
    texts = ["the cat sat on the mat", "vocabulary transfer for sparse retrieval"]
    enc = SpladeEncoder(*splade_tiny, precision="bf16")
    bf16 = enc.encode(texts, show_progress=False).toarray()
    enc.precision = "fp32"
    fp32 = enc.encode(texts, show_progress=False).toarray()
    enc.precision = "native"
    monkeypatch.setattr(prec, "cpu_flags", lambda: prec.parse_cpu_flags(SAPPHIRE))
    monkeypatch.setattr(prec, "choose_auto", lambda *a, **k: pytest.fail("native must not run auto's timing probe"))
    assert enc.resolved_precision() == "bf16"
    np.testing.assert_array_equal(enc.encode(texts, show_progress=False).toarray(), bf16)
    monkeypatch.setattr(prec, "cpu_flags", lambda: prec.parse_cpu_flags(AVX2_ONLY))
    np.testing.assert_array_equal(enc.encode(texts, show_progress=False).toarray(), fp32)


def test_bad_precision_fails_at_construction(splade_tiny):
    with pytest.raises(VtlabError, match="model.encoder.precision"):
        SpladeEncoder(*splade_tiny, precision="half")


def test_auto_choice_says_what_auto_runs_and_why(splade_tiny, monkeypatch):
    """The encoder's auto_choice: the precision resolved_precision runs and the reason of auto's one log line (here
    forced by $VTLAB_AUTO_PRECISION, so nothing is timed); asking an encoder that is not on auto is an error."""
    monkeypatch.setenv(prec.AUTO_ENV, "bf16")
    enc = SpladeEncoder(*splade_tiny, precision="auto")
    choice = enc.auto_choice()
    assert choice.precision == enc.resolved_precision() == "bf16"
    assert choice.reason == f"{prec.AUTO_ENV}=bf16"
    with pytest.raises(ValueError, match="precision is 'fp32', not 'auto'"):
        SpladeEncoder(*splade_tiny, precision="fp32").auto_choice()
