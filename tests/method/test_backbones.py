"""vtlab.backbones: offline errors, decoder site / bias invariants per family, offline backbones, Hydra configs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import need
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import (
    BertConfig,
    BertForMaskedLM,
    ModernBertConfig,
    ModernBertForMaskedLM,
    PreTrainedModel,
    RobertaConfig,
    RobertaForMaskedLM,
)

from vtlab.backbones import Backbone, TinyModernBert, TinyRoberta, decoder_site
from vtlab.core import hub
from vtlab.core.assets import HUB, asset_path
from vtlab.core.errors import AssetError

REPO = Path(__file__).resolve().parents[2]
V, H = 97, 32


def _require(name: str) -> Path:
    return need(asset_path, name)


# -- offline hub -----------------------------------------------------------------------------------------------------
@pytest.mark.cli
def test_offline_hub_error_is_fast_and_one_line() -> None:
    code = textwrap.dedent("""
        import time
        from vtlab.backbones import Backbone
        from vtlab.core.errors import AssetError
        for load in ("load_tokenizer", "load_model"):
            t = time.time()
            try:
                getattr(Backbone("answerdotai/ModernBERT-base"), load)()
            except AssetError as e:
                print(f"{load}\\t{time.time() - t:.2f}\\t{e}")
            else:
                print(f"{load}\\tno error")
    """)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": "/nonexistent-vtlab-hf-home"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert [ln.split("\t")[0] for ln in lines] == ["load_tokenizer", "load_model"], out.stdout
    for ln in lines:
        _, seconds, msg = ln.split("\t")
        assert float(seconds) < 5.0
        assert "backbone.name_or_path='answerdotai/ModernBERT-base'" in msg
        assert "unreachable (offline)" in msg and "local directory" in msg


def test_unreachable_hub_without_offline_flag_is_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    hub.reachable.cache_clear()
    if hub.reachable():
        pytest.skip("the Hugging Face hub is reachable from this machine")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    t = time.time()
    with pytest.raises(AssetError, match="backbone.tokenizer='FacebookAI/roberta-large' must be downloaded"):
        Backbone("x/y", tokenizer="FacebookAI/roberta-large").load_tokenizer()
    assert time.time() - t < 10.0


def test_missing_local_path_is_not_sent_to_the_hub(tmp_path: Path) -> None:
    with pytest.raises(AssetError, match="is not an existing local directory"):
        Backbone(str(tmp_path / "no" / "model")).load_model()


# -- decoder site and bias, per family -------------------------------------------------------------------------------
def _tiny(family: str, **extra) -> PreTrainedModel:
    common = dict(vocab_size=V, hidden_size=H, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    if family == "bert":
        return BertForMaskedLM(BertConfig(**common, **extra))
    if family == "roberta":
        return RobertaForMaskedLM(RobertaConfig(**common, pad_token_id=1, bos_token_id=0, eos_token_id=2, **extra))
    ids = dict(pad_token_id=3, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)
    return ModernBertForMaskedLM(ModernBertConfig(**common, **ids, **extra))


def _expected_site(model: nn.Module, family: str) -> tuple[nn.Module, str]:
    return {
        "bert": (model.cls.predictions if family == "bert" else None, "decoder"),
        "roberta": (getattr(model, "lm_head", None), "decoder"),
        "modernbert": (model, "decoder"),
    }[family]


def _batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, V, (3, 7), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0  # padding: ModernBERT may unpad; the site swap must not care
    mask[2, 2:] = 0
    return {"input_ids": ids, "attention_mask": mask}


@pytest.mark.parametrize(
    "family,extra",
    [
        ("bert", {}),
        ("bert", {"tie_word_embeddings": False}),
        ("roberta", {}),
        ("modernbert", {}),
        ("modernbert", {"sparse_prediction": True}),
    ],
)
def test_decoder_site_bypass_equals_logits(family: str, extra: dict, tmp_path: Path) -> None:
    torch.manual_seed(0)
    src = _tiny(family, **extra)
    with torch.no_grad():
        src.get_output_embeddings().bias.normal_()  # a nonzero bias, so using the wrong one shows
    src.save_pretrained(tmp_path)
    model = Backbone(str(tmp_path)).load_model().eval()
    assert model.config._attn_implementation == "sdpa"
    dec = model.get_output_embeddings()
    assert isinstance(dec, nn.Linear) and dec.bias is not None
    torch.testing.assert_close(dec.bias, src.get_output_embeddings().bias)

    parent, attr = decoder_site(model)
    exp_parent, exp_attr = _expected_site(model, family)
    assert parent is exp_parent and attr == exp_attr and getattr(parent, attr) is dec

    enc = _batch()
    labels = torch.full_like(enc["input_ids"], -100)
    labels[0, 1] = 7
    with torch.no_grad():
        logits = model(**enc).logits
        assert logits.shape == (3, 7, V)
        # sparse_prediction (ModernBERT) would shrink logits to the labelled positions; load_model turns it off.
        assert model(**enc, labels=labels).logits.shape == (3, 7, V)
        parent._modules[attr] = nn.Identity()
        try:
            hidden = model(**enc).logits
        finally:
            parent._modules[attr] = dec
        assert hidden.shape == (3, 7, H)
        torch.testing.assert_close(F.linear(hidden, dec.weight, dec.bias), logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(model(**enc).logits, logits, atol=0, rtol=0)  # restored
        # APC edits get_output_embeddings().bias in place: it must be the effective output bias.
        dec.bias -= 0.5
        torch.testing.assert_close(model(**enc).logits, logits - 0.5, atol=1e-5, rtol=0)


def test_bias_recovered_from_family_slot(tmp_path: Path) -> None:
    """An untied BERT checkpoint that stores the bias only as cls.predictions.bias (the pre-v5 layout)."""
    torch.manual_seed(0)
    src = _tiny("bert", tie_word_embeddings=False)
    src.save_pretrained(tmp_path)
    f = next(tmp_path.glob("*.safetensors"))
    sd = load_file(f)
    bias = torch.randn(V)
    sd["cls.predictions.bias"] = bias
    sd.pop("cls.predictions.decoder.bias", None)
    save_file(sd, f, metadata={"format": "pt"})
    model = Backbone(str(tmp_path)).load_model()
    dec = model.get_output_embeddings()
    torch.testing.assert_close(dec.bias.detach(), bias)
    assert dec.bias is model.cls.predictions.bias


def test_modernbert_without_decoder_bias_gets_a_zero_bias(tmp_path: Path) -> None:
    torch.manual_seed(0)
    src = _tiny("modernbert", decoder_bias=False).eval()
    src.save_pretrained(tmp_path)
    model = Backbone(str(tmp_path)).load_model().eval()
    dec = model.get_output_embeddings()
    assert isinstance(dec.bias, nn.Parameter) and torch.count_nonzero(dec.bias) == 0
    with torch.no_grad():
        torch.testing.assert_close(model(**_batch()).logits, src(**_batch()).logits)


# -- offline pretrained backbones ------------------------------------------------------------------------------------
def test_minilm_head_is_new_and_decoder_tied() -> None:
    path = _require("minilm")
    bb = Backbone("asset:minilm")
    tok, model = bb.load_tokenizer(), bb.load_model()
    assert bb.family == "bert" and type(model).__name__ == "BertForMaskedLM"
    vocab = path.joinpath("vocab.txt").read_text(encoding="utf-8").split("\n")[:30522]
    assert len(tok) == 30522 and all(tok.convert_tokens_to_ids(t) == i for i, t in enumerate(vocab))
    emb = model.bert.embeddings.word_embeddings.weight
    dec = model.get_output_embeddings()
    assert dec.weight.data_ptr() == emb.data_ptr()  # tied, not copied
    ref = load_file(path / "model.safetensors")["embeddings.word_embeddings.weight"]
    torch.testing.assert_close(emb.detach(), ref, atol=0, rtol=0)  # pretrained rows
    assert dec.bias is model.cls.predictions.bias
    assert decoder_site(model) == (model.cls.predictions, "decoder")


def test_a_checkpoint_without_a_head_is_one_vtlab_line_not_transformers_table() -> None:
    """MiniLM has no MLM head: transformers' LOAD REPORT table and its "seem corrupted" line are dropped at their
    logger (vtlab.core.logs), and vtlab says it once, naming the count and the first keys."""
    import logging

    from vtlab.core.logs import quiet_third_party

    _require("minilm")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep(level=logging.DEBUG)
    loggers = [logging.getLogger(n) for n in ("transformers", "vtlab")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(keep)
        lg.setLevel(logging.INFO)
    try:
        quiet_third_party()
        Backbone("asset:minilm").load_model()
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(keep)
            lg.setLevel(level)
    said = [r.getMessage() for r in records]
    assert not [m for m in said if "LOAD REPORT" in m or "seem corrupted" in m], said
    ours = [m for m in said if "weights not in the checkpoint start fresh" in m]
    assert len(ours) == 1 and ": 6 weights" in ours[0] and "cls.predictions" in ours[0], said


def test_splade_tiny_is_a_trained_splade() -> None:
    path = _require("splade-tiny")
    bb = Backbone("asset:splade-tiny")
    tok, model = bb.load_tokenizer(), bb.load_model().eval()
    ref = load_file(path / "model.safetensors")
    emb_key = next(k for k in ref if k.endswith("word_embeddings.weight"))
    torch.testing.assert_close(model.get_output_embeddings().weight.detach(), ref[emb_key], atol=0, rtol=0)
    torch.testing.assert_close(model.get_output_embeddings().bias.detach(), ref["cls.predictions.bias"], atol=0, rtol=0)
    enc = tok(["what causes acid rain"], return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    w = torch.log1p(torch.relu(logits)).amax(dim=1)[0]
    top = tok.convert_ids_to_tokens(w.topk(4).indices.tolist())
    assert {"rain", "acid", "causes"} <= set(top)
    assert 5 <= int((w > 0).sum()) <= 60  # sparse, as a trained SPLADE is


# -- generated tiny backbones ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_tiny_modernbert(fresh_cache: Path) -> None:  # fresh: the build path itself runs
    _require("olmo-tokenizer")
    bb = TinyModernBert()
    tok = bb.load_tokenizer()
    assert Path(bb.name_or_path).parent == fresh_cache / "backbones"
    assert tok("The capital of France is [MASK].")["input_ids"] == [50281, 510, 5347, 273, 6181, 310, 50284, 15, 50282]
    assert (tok.pad_token_id, tok.unk_token_id, tok.mask_token_id, len(tok)) == (50283, 50280, 50284, 50368)
    model = bb.load_model()
    assert type(model).__name__ == "ModernBertForMaskedLM" and model.config.vocab_size == 50368
    assert model.config.hidden_size == 128 and model.config.num_hidden_layers == 2
    assert model.get_output_embeddings().weight.data_ptr() == model.model.embeddings.tok_embeddings.weight.data_ptr()
    # Seeded: the saved weights are exactly a fresh seed-0 build; another seed differs.
    fresh = TinyModernBert()._build_model().state_dict()
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, fresh[k], atol=0, rtol=0)
    other = TinyModernBert(seed=1)._build_model().state_dict()
    key = "model.embeddings.tok_embeddings.weight"
    assert not torch.equal(other[key], fresh[key])
    # Built once: a second instance reuses the directory; other params get another one.
    marker = Path(bb.name_or_path) / "vtlab_backbone.json"
    mtime = marker.stat().st_mtime_ns
    again = TinyModernBert()
    again.load_tokenizer()
    assert again.name_or_path == bb.name_or_path and marker.stat().st_mtime_ns == mtime
    assert TinyModernBert(hidden_size=64).dirname != bb.dirname
    enc = tok(["a short one", "a somewhat longer second text"], padding=True, return_tensors="pt")
    with torch.no_grad():
        assert model(**enc).logits.shape == (2, enc["input_ids"].shape[1], 50368)


def test_tiny_roberta(fresh_cache: Path) -> None:
    _require("gpt2-bpe")
    bb = TinyRoberta()
    tok = bb.load_tokenizer()
    # GPT-2 ids: "Hello"=15496, " world"=995, "The"=464, " capital"=3139, " of"=286, " France"=4881, " is"=318, "."=13.
    assert tok("Hello world")["input_ids"] == [0, 15496 + 4, 995 + 4, 2]
    assert tok("The capital of France is <mask>.")["input_ids"] == [0, 468, 3143, 290, 4885, 322, 50260, 17, 2]
    specials = (tok.bos_token_id, tok.pad_token_id, tok.eos_token_id, tok.unk_token_id, tok.mask_token_id)
    assert specials == (0, 1, 2, 3, 50260)
    text = "naïve café — 🙂  tabs\tand 1234"
    assert tok.decode(tok(text)["input_ids"], skip_special_tokens=True) == text  # byte-level: lossless
    model = bb.load_model().eval()
    assert type(model).__name__ == "RobertaForMaskedLM" and model.config.vocab_size == len(tok) == 50261
    assert decoder_site(model) == (model.lm_head, "decoder")
    enc = tok(["short", "a longer second text here"], padding=True, return_tensors="pt")
    with torch.no_grad():
        assert model(**enc).logits.shape == (2, enc["input_ids"].shape[1], 50261)


# -- Hydra configs ---------------------------------------------------------------------------------------------------
CONFIGS = {
    "bert-uncased": HUB["bert-uncased"],
    "modernbert": HUB["modernbert"],
    "modernbert-large": HUB["modernbert-large"],
    "roberta-large": HUB["roberta-large"],
    "mmbert": HUB["mmbert"],
    "gte-multilingual": HUB["gte-multilingual"],
    "klue-roberta": HUB["klue-roberta"],
    "ax-encoder": HUB["ax-encoder"],
    "minilm": "asset:minilm",
    "splade-tiny": "asset:splade-tiny",
    "tiny-modernbert": "tiny-modernbert",
    "tiny-roberta": "tiny-roberta",
}


def test_backbone_configs_instantiate_without_loading() -> None:
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    files = {p.stem: p for p in (REPO / "conf" / "backbone").glob("*.yaml")}
    assert set(CONFIGS) <= set(files)
    for name, source in CONFIGS.items():
        bb = instantiate(OmegaConf.load(files[name]))
        assert isinstance(bb, Backbone) and bb.name == name and bb.name_or_path == source
        assert bb.trust_remote_code == (name == "gte-multilingual")
    assert isinstance(instantiate(OmegaConf.load(files["tiny-modernbert"])), TinyModernBert)
    assert isinstance(instantiate(OmegaConf.load(files["tiny-roberta"])), TinyRoberta)


# -- incomplete model directories --------------------------------------------------------------------------------------
def test_a_model_directory_without_its_tokenizer_is_refused_naming_what_is_missing(tmp_path: Path) -> None:
    import shutil

    src = _require("splade-tiny")
    model = tmp_path / "no-tokenizer"
    model.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(src / name, model / name)
    with pytest.raises(AssetError, match=r"no-tokenizer: no tokenizer files: expected tokenizer\.json .*backbone\."):
        Backbone(str(model)).load_tokenizer()
    # the same weights with a tokenizer named elsewhere load
    assert len(Backbone(str(model), tokenizer=str(src)).load_tokenizer()) == 30522


def test_a_tokenizer_that_knows_no_word_is_refused(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({"[UNK]": 0, "zzz": 1}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]").save_pretrained(tmp_path / "tok")
    with pytest.raises(AssetError, match=r"maps 'the cat sat on the mat' to unknown tokens only"):
        Backbone(str(_require("splade-tiny")), tokenizer=str(tmp_path / "tok")).load_tokenizer()
