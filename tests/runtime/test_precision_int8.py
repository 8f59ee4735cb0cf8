"""precision=int8 (vtlab.runtime.quantize) on the real offline SPLADE-tiny: every int8 layer within its derived error
bound, the vectors within the bound that follows, retrieval on BoolQ-clean as good as fp32's; training refuses it;
auto takes int8 only where the CPU runs it natively, it agrees with fp32 on the probe and it is faster (faked flags and
timings), and a broken int8 model makes auto fall back."""

import copy
import logging
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from vtlab.backbones import Backbone, decoder_bypassed
from vtlab.core.errors import VtlabError
from vtlab.data.boolq import PROBE_PAIRS, probe_texts
from vtlab.models.encoder import SpladeEncoder
from vtlab.runtime import cpu, quantize
from vtlab.runtime import precision as prec
from vtlab.runtime.pooling import max_logits, tiled_max_logits
from vtlab.runtime.quantize import Int8Decoder, Int8Linear, quantize_network

pytestmark = pytest.mark.skipif(quantize.int8_unavailable() is not None, reason="this torch build has no int8 kernels")

SAPPHIRE = prec.parse_cpu_flags("flags : avx2 avx512f avx512_vnni avx512_bf16 amx_tile amx_bf16 amx_int8\n")
CASCADE_LAKE = prec.parse_cpu_flags("flags : avx2 avx512f avx512bw avx512_vnni\n")  # VNNI, no native bf16
ZEN4 = prec.parse_cpu_flags("flags : avx2 avx512f avx512_vnni avx512_bf16\n")
AVX2_ONLY = prec.parse_cpu_flags("flags : avx avx2 fma\n")
NO_AVX2 = prec.parse_cpu_flags("flags : sse2 sse4_2 avx\n")  # an x86 CPU before Haswell


@pytest.fixture(scope="module")
def tiny():
    b = Backbone("asset:splade-tiny")
    return b.load_model(), b.load_tokenizer()


@pytest.fixture(scope="module")
def passages():
    _, docs = probe_texts()
    return list(docs[:24])


@pytest.fixture
def auto_env(monkeypatch):
    monkeypatch.delenv(prec.AUTO_ENV, raising=False)  # auto must follow the faked CPU, not the suite's override


def _qmax(reduce_range: bool) -> int:
    return 127 if reduce_range else 255


def _activation_step(x: torch.Tensor, reduce_range: bool) -> float:
    """The largest per-call activation scale: range [min(x, 0), max(x, 0)] over qmax steps (activation_grid)."""
    return (max(float(x.max()), 0.0) - min(float(x.min()), 0.0)) / _qmax(reduce_range)


def _dequantized(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q, s = quantize.quantize_weight(weight)
    return q.float() * s[:, None], s


# ---------------------------------------------------------------------------------------------- derived error bounds
#
# One int8 product, for an activation row x (H values) and a weight row w_v:  x̂ = x + δx, ŵ = w + δw with
#   |δw_k| ≤ s_w[v] / 2             (per-channel symmetric weights: round-to-nearest on a grid of step s_w[v])
#   |δx_k| ≤ s_x / 2                (round-to-nearest on the activation grid of step s_x; s_x = range / qmax)
#   |x̂·ŵ − x·w| = |δx·ŵ + x·δw| ≤ (s_x / 2)·‖ŵ_v‖₁ + (s_w[v] / 2)·‖x‖₁          (exact int32 sums, then one fp32 scale)
# fbgemm rounds its zero point to an integer, which can shift the grid by half a step: its layers get s_x, not s_x/2.
# The max over positions is 1-Lipschitz in the sup norm, and so is log1p∘relu: a SPLADE weight is off by at most the
# largest bound over the text's positions.


def test_int8_decoder_within_its_error_bound(tiny, passages):
    """The tiled int8 max-logits vs fp32's on SPLADE-tiny's real hidden states (padding, several tiles)."""
    model, tok = tiny
    batch = tok(passages, padding=True, truncation=True, max_length=256, return_tensors="pt")
    mask = batch["attention_mask"]
    with torch.inference_mode(), decoder_bypassed(model) as decoder:
        hidden = model(**batch).logits  # [B, L, H]: what the pooling multiplies by the decoder
        head = Int8Decoder(decoder)
        # default tiles: 2 texts of ~200 tokens each, so 12 row tiles, each with its own activation scale
        z8 = tiled_max_logits(hidden, head, mask)
        z32 = max_logits(hidden, decoder.weight, decoder.bias, mask)
    real = hidden[mask.bool()]  # [tokens, H]
    w_hat, s_w = _dequantized(decoder.weight)
    s_x = _activation_step(real, head.reduce_range)  # ≥ every tile's own step (a tile's range is within the batch's)
    bound = (s_x / 2) * w_hat.abs().sum(1) + (s_w / 2) * real.abs().sum(1).max() + 1e-4  # [V]; 1e-4: fp32 rounding
    err = (z8 - z32).abs()
    assert torch.isfinite(z8).all() and bool((err <= bound).all()), float((err - bound).max())
    assert float(err.max()) > 0  # int8 really ran
    # a worst case (every rounding error aligned): ~1/3 of the logits' spread here; the typical error is ~√H times
    # smaller (independent roundings), which the agreement and retrieval tests below hold int8 to
    enc_vectors = torch.log1p(torch.relu(z8)) - torch.log1p(torch.relu(z32))
    assert bool((enc_vectors.abs() <= bound).all())


def test_int8_linear_within_its_error_bound(tiny, passages):
    """Each body layer kind (attention, FFN in, FFN out after GELU) on its real inputs, captured from SPLADE-tiny."""
    model, tok = tiny
    layer = model.bert.encoder.layer[1]
    linears = {"query": layer.attention.self.query, "ffn_in": layer.intermediate.dense, "ffn_out": layer.output.dense}
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        m.register_forward_pre_hook(lambda mod, args, name=name: seen.setdefault(name, args[0].detach()))
        for name, m in linears.items()
    ]
    batch = tok(passages, padding=True, truncation=True, max_length=256, return_tensors="pt")
    try:
        with torch.inference_mode():
            model(**batch)
    finally:
        for h in hooks:
            h.remove()
    for name, lin in linears.items():
        x = seen[name].reshape(-1, lin.in_features)
        int8 = Int8Linear(lin)
        with torch.inference_mode():
            err = (int8(x) - lin(x)).abs()
        w_hat, s_w = _dequantized(lin.weight)
        s_x = _activation_step(x, int8.reduce_range)
        # s_x (not s_x / 2): fbgemm's integer zero point (see above); + s_x·s_w/2·H: the δx·δw term
        bound = (
            s_x * w_hat.abs().sum(1)[None, :]
            + (s_w / 2)[None, :] * x.abs().sum(1)[:, None]
            + s_x * (s_w / 2)[None, :] * lin.in_features
            + 1e-4
        )
        assert bool((err <= bound).all()), (name, float((err - bound).max()))
        assert float(err.max()) > 0


@pytest.mark.cli
@pytest.mark.parametrize("level", ["avx2", "avx2_vnni"])
def test_int8_linears_hold_their_bound_where_fbgemm_has_no_vnni(level):
    """The bound test again, in a child process held to a CPU kind without fbgemm's VNNI kernels (vtlab.runtime.cpu:
    AVX2 only, and Intel client CPUs with AVX-VNNI but no AVX-512): fbgemm's AVX2 kernels sum u8×s8 pairs in saturating
    int16, so the default activation grid must be 7-bit there. (It was 8-bit on AVX-VNNI CPUs while the choice went by
    the CPU's VNNI instead of fbgemm's: max error 0.97 for a bound of ~0.5.)"""
    if not {"avx2", "fma"} <= cpu.parse_cpu_flags(open("/proc/cpuinfo").read()):
        pytest.skip("the libraries can only be held to AVX2 on a CPU that has it")
    held = {var for env in cpu.LIBRARY_ENV.values() for var in env} | {cpu.ISA_ENV, "PYTEST_ADDOPTS"}
    env = {k: v for k, v in os.environ.items() if k not in held} | cpu.isa_env(level)
    test = f"{__file__}::test_int8_linear_within_its_error_bound"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-3000:]


def test_int8_vectors_within_the_derived_bound(tiny, passages):
    """Whole encoder: int8 body + int8 decoder vs fp32. With ĥ the int8 body's hidden states,
    |ẑ − z| ≤ |Q(w)·Q(ĥ) − w·ĥ| + |w·(ĥ − h)| ≤ decoder bound at ĥ + ‖w_v‖₁·max|ĥ − h|   (per term v)."""
    model, tok = tiny
    enc = SpladeEncoder(model, tok, precision="fp32")
    _, ids, mask = next(enc.batches(passages, "doc", len(passages)))
    q = quantize_network(model)  # the body this CPU runs with int8 (bf16 where native, else int8)
    with torch.inference_mode():
        with decoder_bypassed(model) as decoder:
            h = model(input_ids=ids, attention_mask=mask).logits
        with decoder_bypassed(q.net), q.body():
            h8 = q.net(input_ids=ids, attention_mask=mask).logits.float()
        z32 = enc.max_logits(ids, mask)
        with enc.int8_networks():
            z8 = enc.max_logits(ids, mask)
    real = mask.bool()
    dh = float((h8 - h)[real].abs().max())
    # the int8 body is close: its hidden states within a few % of their range (measured ≈ 3%; a broken body is not)
    assert 0 < dh < 0.1 * float(h[real].abs().max())
    w_hat, s_w = _dequantized(decoder.weight)
    s_x = _activation_step(h8[real], q.decoder.reduce_range)
    bound = (
        (s_x / 2) * w_hat.abs().sum(1)
        + (s_w / 2) * h8[real].abs().sum(1).max()
        + decoder.weight.abs().sum(1) * dh
        + 1e-4
    )
    err = (z8 - z32).abs()
    assert bool((err <= bound).all()), float((err - bound).max())
    v32 = enc.encode(passages, show_progress=False)  # and through encode() itself
    enc.precision = "int8"
    v8 = enc.encode(passages, show_progress=False)
    cos = prec.row_cosines(v32, v8)
    assert cos.mean() >= prec.MIN_DOC_COSINE and cos.min() > 0.95


def test_int8_leaves_the_fp32_model_alone_and_follows_its_weights(tiny, passages):
    model, tok = tiny
    model = copy.deepcopy(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    enc = SpladeEncoder(model, tok, precision="int8")
    first = enc.encode(passages[:4], show_progress=False)
    assert all(type(m) is not Int8Linear for m in model.modules())  # the copy was quantized, not the model
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    # the encoder still pickles and deep-copies (the packed int8 weights are dropped, rebuilt on use)
    clone = copy.deepcopy(enc)
    assert (abs(clone.encode(passages[:4], show_progress=False) - first)).max() == 0
    pickle.loads(pickle.dumps(enc))
    with torch.no_grad():  # e.g. a training step or APC: the int8 copy must follow
        enc.output_bias().add_(1.0)
    assert (enc.encode(passages[:4], show_progress=False).sum(1) > first.sum(1)).all()


def test_computing_applies_the_precision_outside_encode(tiny, passages):
    """For callers that run the encoder's forward themselves (a Lightning predict step): encoder.computing()."""
    enc = SpladeEncoder(*tiny, precision="int8")
    idx, ids, mask = next(enc.batches(passages[:4], "doc", 4))
    with torch.inference_mode():
        with enc.computing():
            w8 = enc(ids, mask).numpy()
        w32 = enc(ids, mask).numpy()
    v8 = enc.encode(passages[:4], show_progress=False).toarray()[idx]
    assert np.array_equal(w8, v8) and not np.array_equal(w32, v8)


@pytest.mark.slow
def test_int8_ranks_boolq_clean_like_fp32(tiny, shared_cache):
    """200 BoolQ-clean questions over their 200 passages + 200 distractors, vtlab's evaluation: nDCG@10 of int8
    ≥ 99.5% of fp32's, and the two runs' top-10 lists mostly the same documents."""
    from vtlab.data.clean import boolq_clean_collection
    from vtlab.evaluation import compute_metrics
    from vtlab.index import InvertedIndex, to_run

    collection = boolq_clean_collection("validation", max_queries=200, max_docs=400)
    query_ids, doc_ids = list(collection.queries), list(collection.corpus)
    enc = SpladeEncoder(*tiny, precision="fp32")
    top10, ndcg = {}, {}
    for p in ("fp32", "int8"):
        enc.precision = p
        q = enc.encode([collection.queries[i] for i in query_ids], "query", show_progress=False)
        d = enc.encode([collection.corpus[i] for i in doc_ids], "doc", show_progress=False)
        scores, idx = InvertedIndex(d, doc_ids).search(q, 100)
        ndcg[p] = compute_metrics(to_run(scores, idx, query_ids, doc_ids), collection.qrels, ["nDCG@10"])["nDCG@10"]
        top10[p] = np.asarray(idx)[:, :10]
    assert len(query_ids) == 200 and ndcg["int8"] >= 0.995 * ndcg["fp32"], ndcg
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(top10["fp32"], top10["int8"])])
    assert overlap >= prec.MIN_TOP10_OVERLAP, overlap


# ---------------------------------------------------------------------------------------------------- training


def test_training_refuses_int8(tiny):
    from vtlab.models.splade import SpladeModule

    enc = SpladeEncoder(copy.deepcopy(tiny[0]), tiny[1], precision="int8")
    module = SpladeModule(enc, loss=None, optimizer=torch.optim.AdamW)
    with pytest.raises(VtlabError) as info:
        module.on_fit_start()  # what Lightning's fit calls before the first step: train mode on
    assert "model.encoder.precision=int8" in str(info.value) and "\n" not in str(info.value)
    enc.precision = "auto"  # the same encoder trains once it is not int8
    module.on_fit_start()
    assert enc.training


# ----------------------------------------------------------------------------------------------- auto's choice


@pytest.mark.parametrize(
    "flags, expected",
    [
        (SAPPHIRE, ("int8", "bf16", "fp32")),
        (ZEN4, ("int8", "bf16", "fp32")),
        (CASCADE_LAKE, ("int8", "fp32")),
        (AVX2_ONLY, ("int8", "fp32")),  # vtlab's AVX2 int8 kernel (vpmaddubsw); no native bf16
        (NO_AVX2, ("fp32",)),
        (frozenset(), ("fp32",)),
    ],
)
def test_auto_candidates_follow_the_flags(flags, expected):
    assert prec.auto_candidates("cpu", flags) == expected
    assert prec.auto_candidates("cuda", flags) == ("fp32",)
    assert prec.resolve_precision("auto", "cpu", flags) == next(p for p in expected if p != "int8")


def _trial(p, speed, cos=0.999, overlap=0.97):
    return prec.Trial(p, speed, None if p == "fp32" else prec.Agreement(cos, overlap))


@pytest.mark.parametrize(
    "trials, expected, why",
    [
        ({"fp32": 100, "bf16": 250, "int8": 300}, "int8", "fastest"),
        ({"fp32": 100, "bf16": 320, "int8": 300}, "bf16", "fastest"),
        ({"fp32": 100, "bf16": 250, "int8": (300, 0.95)}, "bf16", "int8 fails the check (doc cosine 0.9500 < 0.99"),
        ({"fp32": 100, "bf16": 250, "int8": (300, 0.999, 0.8)}, "bf16", "top-10 overlap 0.800 < 0.9"),
        ({"fp32": 100, "int8": 90}, "fp32", "int8 not faster than fp32"),
        ({"fp32": 100, "bf16": 80, "int8": 95}, "fp32", "bf16 not faster than fp32"),
    ],
)
def test_choice_from_faked_timings(trials, expected, why):
    faked = {p: _trial(p, *(v if isinstance(v, tuple) else (v,))) for p, v in trials.items()}
    candidates = tuple(p for p in prec.PREFERENCE if p in faked)
    choice = prec.choose(candidates, faked)
    assert choice.precision == expected and why in choice.reason


def test_choose_auto_checks_once_caches_and_says_why(auto_env, empty_cache, caplog):
    calls = []

    def measure(p):
        calls.append(p)
        return _trial(p, {"fp32": 100.0, "bf16": 200.0, "int8": 300.0}[p])

    with caplog.at_level(logging.INFO, logger="vtlab"):
        choice = prec.choose_auto(("int8", "bf16", "fp32"), measure, "k1", flags=SAPPHIRE)
    assert choice.precision == "int8" and calls == ["fp32", "int8", "bf16"]  # fp32 first: the reference
    lines = [r.getMessage() for r in caplog.records if "model.encoder.precision=auto" in r.getMessage()]
    assert len(lines) == 1 and "→ int8" in lines[0] and "doc cosine" in lines[0] and "amx_int8" in lines[0]
    again = prec.choose_auto(("int8", "bf16", "fp32"), measure, "k1", flags=SAPPHIRE)
    assert again == choice and len(calls) == 3  # from the cache: no second check
    # no int8 kernels in this torch: the next candidate, and the line says why
    without = prec.choose_auto(("int8", "bf16", "fp32"), measure, "k2", why_not_int8="no kernels", flags=SAPPHIRE)
    assert without.precision == "bf16" and "int8 not possible: no kernels" in without.reason and len(calls) == 3


def test_env_forces_int8_without_a_check(tiny, auto_env, monkeypatch):
    monkeypatch.setenv(prec.AUTO_ENV, "int8")
    enc = SpladeEncoder(*tiny, precision="auto")  # no probe texts: a forced precision needs none
    monkeypatch.setattr(enc.policy, "_probe_trial", lambda *a: pytest.fail("no check when forced"))
    assert enc.resolved_precision() == "int8"


@pytest.mark.slow
def test_real_int8_passes_the_check(tiny):
    """SPLADE-tiny's int8 agrees with fp32 on the real probe (200 BoolQ-train pairs), as auto's check measures it."""
    enc = SpladeEncoder(*tiny, precision="auto", probe=probe_texts)
    questions, docs = probe_texts()
    assert len(questions) == PROBE_PAIRS and len(docs) > 0.9 * PROBE_PAIRS
    reference: dict = {}
    fp32 = enc.policy._probe_trial(enc, "fp32", questions, docs, reference)
    int8 = enc.policy._probe_trial(enc, "int8", questions, docs, reference)
    assert fp32.agreement is None and fp32.docs_per_s > 0 and int8.docs_per_s > 0
    assert int8.agreement.holds(), int8.agreement


def test_broken_int8_makes_auto_fall_back(tiny, auto_env, empty_cache, monkeypatch, caplog):
    """With 4-bit-like weights (per-channel scales ×16) int8 fails the check, and auto, on a VNNI CPU (faked) where
    int8 is its first choice, falls back to fp32 and says why in its one line. (A smaller probe keeps this test short:
    the broken model fails by far, 0.91 mean cosine.)"""
    questions, docs = probe_texts()
    monkeypatch.setattr(
        quantize, "weight_scales", lambda w: (w.detach().float().abs().amax(1) / 127 * 16).clamp_min(1e-12)
    )
    monkeypatch.setattr(prec, "cpu_flags", lambda: CASCADE_LAKE)
    enc = SpladeEncoder(*tiny, precision="auto", probe=lambda: (questions[:48], docs[:48]))
    with caplog.at_level(logging.INFO, logger="vtlab"):
        assert enc.resolved_precision() == "fp32"
        assert enc.resolved_precision() == "fp32"  # decided once per weights
    lines = [r.getMessage() for r in caplog.records if "precision=auto" in r.getMessage()]
    assert len(lines) == 1 and "→ fp32" in lines[0] and "int8 fails the check (doc cosine" in lines[0], lines
    assert "avx512_vnni" in lines[0]


def test_explicit_int8_refuses_a_torch_without_kernels(tiny, monkeypatch):
    monkeypatch.setattr(quantize, "_AVAILABLE", ["model.encoder.precision=int8: this torch build has no int8"])
    enc = SpladeEncoder(*tiny, precision="int8")
    with pytest.raises(VtlabError, match=r"^model.encoder.precision=int8: this torch build"):
        enc.encode(["a text"], show_progress=False)


def test_linear_copy_replaces_every_linear_but_the_decoder(tiny):
    model, _ = tiny
    q = quantize_network(model, body="int8")
    linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    kinds = {n: type(m) for n, m in q.net.named_modules()}
    decoder = next(n for n, m in model.named_modules() if m is model.get_output_embeddings())
    assert kinds[decoder] is nn.Linear and all(kinds[n] is Int8Linear for n in linears if n != decoder)
    top = float(model.get_output_embeddings().weight.detach().abs().max())
    assert np.isclose(float(q.decoder.scales.max()), top / 127)


@pytest.mark.parametrize(
    "cpuinfo,body", [("flags : avx2 avx512_vnni avx512_bf16", "bf16"), ("flags : avx2 avx512_vnni", "int8")]
)
def test_int8_body_follows_native_bf16(tiny, monkeypatch, cpuinfo, body):
    """The body runs in bf16 where the CPU computes bf16 natively (the fp32 network itself, shared, under autocast),
    else as an int8 copy; the decoder is int8 either way. A bad body name is refused."""
    from vtlab.runtime import precision as prec
    from vtlab.runtime import quantize

    monkeypatch.setattr(quantize, "cpu_flags", lambda: prec.parse_cpu_flags(cpuinfo))
    model, _ = tiny
    q = quantize_network(model)
    assert q.body_bf16 == (body == "bf16")
    assert (q.net is model) == (body == "bf16")
    assert any(isinstance(m, Int8Linear) for m in q.net.modules()) == (body == "int8")
    assert isinstance(q.decoder, Int8Decoder)
    with pytest.raises(ValueError, match="body='fp16'"):
        quantize_network(model, body="fp16")
