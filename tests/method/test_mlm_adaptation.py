"""The real-case MLM adaptation (conf/mlm/real-case.yaml): the body frozen — only the vocabulary rows, the head's
transform and the output bias train —, a warm-up proportional to the run, a held-out share of the corpus that no arm
trains on, and the probe's numbers on it checked against the model's own loss (an independent reference)."""

import logging

import pytest
import torch
from helpers import compose_config
from omegaconf import OmegaConf

from vtlab.backbones import TinyBert
from vtlab.core import progress as progress_module
from vtlab.core.errors import VtlabError
from vtlab.core.progress import INTERVAL_ENV
from vtlab.data.text import TextDataModule
from vtlab.models.mlm import _fit_head, check_recipe, freeze_all_but, warmup_steps
from vtlab.models.mlm_probe import _mask, is_held_out, probe, split_held_out


@pytest.fixture(scope="module")
def real_case_mlm():
    return compose_config(["experiment=testbed/real-case/e5-vt"]).mlm


def test_the_real_case_adaptation_trains_the_rows_the_head_and_the_bias_and_freezes_the_body(real_case_mlm):
    model = TinyBert().load_model()
    kept = freeze_all_but(model, list(real_case_mlm.trainable))
    assert kept == [
        "bert.embeddings.word_embeddings.weight",  # tied: the input rows and the output rows
        "cls.predictions.bias",
        "cls.predictions.transform.dense.weight",
        "cls.predictions.transform.dense.bias",
        "cls.predictions.transform.LayerNorm.weight",
        "cls.predictions.transform.LayerNorm.bias",
    ]
    body = [n for n, p in model.named_parameters() if n.startswith("bert.encoder.")]
    assert body and not any(p.requires_grad for n, p in model.named_parameters() if n in body)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight


def test_the_warm_up_follows_the_length_and_a_bad_ratio_is_refused(real_case_mlm):
    assert real_case_mlm.steps == 256 and warmup_steps(real_case_mlm) == 26  # a tenth of the run
    assert warmup_steps({"steps": 100, "warmup_ratio": 0.25, "warmup_steps": 7}) == 25
    assert warmup_steps({"steps": 100, "warmup_ratio": None, "warmup_steps": 7}) == 7
    with pytest.raises(VtlabError, match=r"mlm.warmup_ratio=1.5"):
        check_recipe(OmegaConf.create({**OmegaConf.to_container(real_case_mlm), "warmup_ratio": 1.5}))


def test_the_held_out_passages_are_the_same_for_every_order_and_about_the_share():
    texts = [f"passage number {i} about a topic" for i in range(4000)]
    train, held = split_held_out(texts, 0.05, seed=0)
    assert len(train) + len(held) == len(texts) and not set(train) & set(held)
    assert 0.04 < len(held) / len(texts) < 0.06  # a hash, not a count: about the share
    train_r, held_r = split_held_out(list(reversed(texts)), 0.05, seed=0)
    assert set(held_r) == set(held)  # chosen by the text alone, not its place in the corpus
    assert set(split_held_out(texts, 0.05, seed=1)[1]) != set(held)
    assert all(is_held_out(t, 0.05) for t in held) and split_held_out(texts, 0.0)[1] == []
    with pytest.raises(VtlabError, match=r"mlm.held_out.share=1.0"):
        split_held_out(texts, 1.0)


def test_the_probe_loss_is_the_models_own_cross_entropy_at_the_masked_positions():
    backbone = TinyBert()
    model, tokenizer = backbone.load_model(), backbone.load_tokenizer()
    texts = [f"The {w} of the river is longer than the {v} of the lake." for w, v in [("length", "width")] * 3]
    texts += ["Portuguese and English passages, with Capitals and punctuation!"] * 3
    data = TextDataModule(texts, tokenizer, max_length=24)
    data.setup("fit")
    spans, lengths = data.dataset.spans, data.dataset.lengths
    assert len(lengths) <= 32  # one probe batch: its masking seed is `seed`
    report = probe(model, spans, lengths, tokenizer.all_special_ids, tokenizer.mask_token_id, 0.3, seed=5)
    # the reference: the masked inputs the probe builds, through the model with its own labels and loss
    ids = torch.from_numpy(spans.astype("int64"))
    attn = (torch.arange(ids.shape[1])[None, :] < torch.from_numpy(lengths)[:, None]).long()
    special = torch.tensor(sorted(tokenizer.all_special_ids))
    inputs, chosen = _mask(ids, attn.bool(), special, 0.3, 5, tokenizer.mask_token_id)
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    model.eval()
    with torch.no_grad():
        out = model(input_ids=inputs, attention_mask=attn, labels=labels)
        own = model(input_ids=ids, attention_mask=attn).logits.argmax(-1)
    real = attn.bool() & ~torch.isin(ids, special)
    assert report["masked"] == int(chosen.sum()) > 0
    assert report["loss"] == pytest.approx(float(out.loss), rel=1e-4)
    assert report["own_top1"] == pytest.approx(float((own[real] == ids[real]).float().mean()), abs=1e-6)


def test_the_head_fit_and_the_held_out_probe_say_how_far_they_got(monkeypatch, caplog):
    """Off a terminal (VTLAB_PROGRESS_INTERVAL=0: a line per update), the MLM corpus is tokenized with a line per
    document, the head fit reads its spans and the held-out probe probes them with a line per batch of spans, and the
    fit's solve says when it starts."""
    monkeypatch.setattr(progress_module, "interactive", lambda: False)
    monkeypatch.setenv(INTERVAL_ENV, "0")
    backbone = TinyBert()
    model, tokenizer = backbone.load_model(), backbone.load_tokenizer()
    texts = [f"passage {i}: the river {i} is longer than the lake {i}, and wider too." for i in range(80)]
    data = TextDataModule(texts, tokenizer, max_length=16)
    with caplog.at_level(logging.INFO, logger="vtlab"):
        report = _fit_head(model, tokenizer, data, {"spans": 40})
        n = len(data.dataset.lengths)
        probe(model, data.dataset.spans, data.dataset.lengths, tokenizer.all_special_ids, tokenizer.mask_token_id)
    messages = [r.getMessage() for r in caplog.records]
    tokenizing = [m.split(", ")[0] for m in messages if m.startswith("MLM corpus: tokenizing")]
    assert tokenizing[-1] == "MLM corpus: tokenizing: 80 documents" and len(tokenizing) > 1
    reading = [m.split(", ")[0] for m in messages if m.startswith("mlm.head_fit: reading")]
    assert reading == ["mlm.head_fit: reading: 32/40 spans (80%)", "mlm.head_fit: reading: 40/40 spans (100%)"]
    assert f"mlm.head_fit: solving for {report['positions']:,} positions ..." in messages
    probing = [m.split(", ")[0] for m in messages if m.startswith("mlm.held_out: probing")]
    assert probing[-1] == f"mlm.held_out: probing: {n}/{n} spans (100%)" and len(probing) == -(-n // 32)
