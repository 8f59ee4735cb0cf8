"""MLM adaptation: span packing + masking statistics, a real loss decrease, the cached Hydra stage, offline corpora."""

import functools
import time
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from helpers import compose_config

from vtlab.backbones import TinyModernBert
from vtlab.core.errors import AssetError, VtlabError
from vtlab.data import corpora
from vtlab.data.text import TextDataModule, pack_spans
from vtlab.models.mlm import MLMModule

pytestmark = pytest.mark.usefixtures("shared_cache")


@pytest.fixture(scope="module")
def tiny():
    return TinyModernBert()


@pytest.fixture(scope="module")
def tokenizer(tiny):
    return tiny.load_tokenizer()


def _first_batch(tokenizer, seed=0, **kw):
    dm = TextDataModule(functools.partial(corpora.boolq_passages, max_docs=300), tokenizer, seed=seed, **kw)
    dm.setup("fit")
    return dm, next(iter(dm.train_dataloader()))


def test_pack_spans_wraps_every_span_and_keeps_all_tokens():
    spans, lengths = pack_spans([[1, 2, 3], [], [4, 5, 6, 7]], start=100, end=101, max_length=5)
    # stream 1 2 3 SEP 4 5 6 7 → bodies of 3
    assert spans[:, 0].tolist() == [100] * 3
    assert [spans[i, : lengths[i]].tolist() for i in range(3)] == [
        [100, 1, 2, 3, 101],
        [100, 101, 4, 5, 101],
        [100, 6, 7, 101],
    ]


def test_masking_rate_specials_span_shape_and_seed(tokenizer):
    dm, batch = _first_batch(tokenizer, batch_size=64, max_length=128, mlm_probability=0.3)
    ids, labels, attn = batch["input_ids"], batch["labels"], batch["attention_mask"]
    assert ids.shape[1] <= 128 and (ids[:, 0] == tokenizer.cls_token_id).all()
    # the original ids: labels where masked, else the (unchanged) input
    original = torch.where(labels != -100, labels, ids)
    special = torch.isin(original, torch.tensor(tokenizer.all_special_ids)) | (attn == 0)
    assert (labels[special] == -100).all(), "a special or padding token was masked"
    share = (labels[~special] != -100).float().mean().item()
    assert abs(share - 0.3) < 0.03, share
    # 80/10/10: most masked inputs show [MASK]
    masked = labels != -100
    assert 0.7 < (ids[masked] == tokenizer.mask_token_id).float().mean().item() < 0.9
    _, again = _first_batch(tokenizer, batch_size=64, max_length=128, mlm_probability=0.3)
    assert all(torch.equal(batch[k], again[k]) for k in batch)
    _, other = _first_batch(tokenizer, seed=1, batch_size=64, max_length=128, mlm_probability=0.3)
    assert not torch.equal(batch["input_ids"], other["input_ids"])
    assert dm.num_docs == 300 and dm.num_tokens > 20_000 and len(dm.dataset) == -(-(dm.num_tokens + 299) // 126)


@pytest.mark.parametrize("p", [0, 1, 1.5, -0.1])
def test_mlm_probability_validated(p):
    with pytest.raises(VtlabError, match="mlm.mlm_probability"):
        TextDataModule(["text"], None, mlm_probability=p)


@pytest.mark.train
def test_training_reduces_loss_and_keeps_decoder_tied(tokenizer, tmp_path):
    pl.seed_everything(0)
    # narrower than the default tiny model: on CPU the step cost is the 50k-row embedding/decoder, ∝ hidden size
    model = TinyModernBert(hidden_size=64, num_hidden_layers=1, intermediate_size=128).load_model()
    dm = TextDataModule(
        functools.partial(corpora.boolq_passages, max_docs=300), tokenizer, batch_size=8, max_length=64, seed=0
    )
    module = MLMModule(model, functools.partial(torch.optim.AdamW, lr=1e-3))
    losses: list[float] = []

    class Record(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            losses.append(float(outputs["loss"]))

    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=30,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Record()],
        default_root_dir=str(tmp_path),
    )
    trainer.fit(module, datamodule=dm)
    assert len(losses) == 30
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    print(f"MLM loss: first 5 steps {first:.3f}, last 5 steps {last:.3f}")
    assert last < first - 0.5, (first, last)
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert model.sparse_prediction is False  # never switched on: SPLADE needs full logits


@pytest.mark.slow
@pytest.mark.parametrize("family", ["bert", "modernbert", "roberta"])
def test_sparse_prediction_loss_equals_the_models_own(family, tokenizer):
    """Decoder on masked rows only == HF's loss over full B×L×V logits (model(labels=...).loss), and its gradient."""
    from vtlab.backbones import TinyBert, TinyRoberta

    backbone = {"bert": TinyBert, "modernbert": TinyModernBert, "roberta": TinyRoberta}[family]()
    tok = backbone.load_tokenizer()
    _, batch = _first_batch(tok, batch_size=4, max_length=32)
    results = []
    for sparse in (True, False):
        model = backbone.load_model().eval()  # no dropout: both paths see the same network
        module = MLMModule(model, functools.partial(torch.optim.AdamW, lr=1e-3), sparse_prediction=sparse)
        logits, target = module.mlm_logits(batch)
        loss = torch.nn.functional.cross_entropy(logits, target, ignore_index=-100)
        reference = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
        ).loss
        torch.testing.assert_close(loss, reference, rtol=1e-5, atol=1e-5)
        loss.backward()
        results.append((int((target != -100).sum()), model.get_input_embeddings().weight.grad.clone()))
        assert logits.shape[0] == (int((batch["labels"] != -100).sum()) if sparse else batch["labels"].numel())
    assert results[0][0] == results[1][0]
    torch.testing.assert_close(results[0][1], results[1][1], rtol=1e-4, atol=1e-6)


@pytest.mark.train
def test_stage_trains_caches_and_skips(tmp_path, monkeypatch):
    from transformers import AutoModelForMaskedLM

    from vtlab.stages import mlm as stage

    run_dir = tmp_path / "run"
    cfg = compose_config(
        [
            "backbone=tiny-modernbert",
            "vocab=native",
            "mlm.steps=3",
            "mlm.batch_size=4",
            "logger=none",
            f"paths.run_dir={run_dir}",
            "mlm.corpus.max_docs=200",
            "mlm.warmup_steps=1",
            "mlm.log_every_n_steps=1",
        ]
    )
    state = stage.run(cfg, {"keep": 1})
    out = Path(state["backbone"].name_or_path)
    assert state["keep"] == 1 and state["mlm_report"]["steps"] == 3
    assert (run_dir / "mlm" / "model").resolve() == out.resolve()
    assert (run_dir / "mlm" / "csv" / "metrics.csv").is_file()
    adapted = AutoModelForMaskedLM.from_pretrained(out)
    start = TinyModernBert().load_model()
    a, b = adapted.get_input_embeddings().weight, start.get_input_embeddings().weight
    assert a.shape == b.shape and not torch.equal(a, b)
    assert adapted.config.sparse_prediction is False
    mtime = (out / "vtlab_mlm.json").stat().st_mtime

    def boom(*a, **k):
        raise AssertionError("trained again although cached")

    monkeypatch.setattr("vtlab.models.mlm._train", boom)
    again = stage.run(cfg, {})
    assert Path(again["backbone"].name_or_path) == out and (out / "vtlab_mlm.json").stat().st_mtime == mtime

    off = compose_config(
        ["backbone=tiny-modernbert", "vocab=native", "mlm.steps=0", "logger=none", f"paths.run_dir={run_dir}"]
    )
    state0 = {"x": object()}
    assert stage.run(off, state0) is state0


def test_sweep_and_paper_config_compose():
    cfg = compose_config(["mlm=paper", "logger=none"])
    assert cfg.mlm.steps == 20000 and cfg.mlm.batch_size * cfg.mlm.accumulate_grad_batches == 2048
    assert cfg.mlm.corpus._target_ == "vtlab.data.corpora.wikibook"
    assert compose_config(["mlm.steps=500"]).mlm.steps == 500


@pytest.mark.parametrize(
    "fn,name",
    [
        (corpora.wikipedia, "wikimedia/wikipedia"),
        (corpora.bookcorpus, "bookcorpus"),
        (corpora.wikibook, "wikimedia/wikipedia"),
    ],
)
def test_offline_hub_corpus_fails_fast_naming_dataset(fn, name, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    began = time.perf_counter()
    with pytest.raises(AssetError, match=name):
        fn(max_docs=10)
    assert time.perf_counter() - began < 10


@pytest.mark.train
def test_trainable_freezes_every_other_parameter_through_a_training_step(tokenizer, tmp_path):
    """`mlm.trainable` (the testbed's build: the vocabulary rows and output bias only): a real optimizer step moves
    exactly the matched parameters; a pattern that matches nothing is refused, naming the key."""
    from vtlab.backbones import TinyBert
    from vtlab.models.mlm import freeze_all_but

    backbone = TinyBert()
    model = backbone.load_model()
    kept = freeze_all_but(model, ["word_embeddings", r"cls\.predictions\.bias"])
    assert kept == ["bert.embeddings.word_embeddings.weight", "cls.predictions.bias"]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    dm = TextDataModule(
        functools.partial(corpora.boolq_passages, max_docs=50),
        backbone.load_tokenizer(),
        batch_size=4,
        max_length=32,
        seed=0,
    )
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )
    trainer.fit(MLMModule(model, functools.partial(torch.optim.AdamW, lr=1e-2)), datamodule=dm)
    moved = {n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert moved == set(kept)
    assert freeze_all_but(model, None) == [n for n, p in model.named_parameters() if p.requires_grad] != kept
    with pytest.raises(VtlabError, match=r"mlm.trainable=\['nothing-here'\] matches no parameter"):
        freeze_all_but(model, ["nothing-here"])


@pytest.mark.cli
def test_a_launcher_worker_process_masks_the_same_batches_as_a_job_run_alone(tokenizer, monkeypatch):
    """hydra/launcher=parallel runs a job in a joblib worker (a process not named "MainProcess"), where HF's collator
    refused its seed; vtlab's collator seeds there as in the main process."""
    import multiprocessing

    _, alone = _first_batch(tokenizer, batch_size=8, max_length=64)
    monkeypatch.setattr(multiprocessing.current_process(), "name", "LokyProcess-1")
    _, in_worker = _first_batch(tokenizer, batch_size=8, max_length=64)
    assert all(torch.equal(alone[k], in_worker[k]) for k in alone)


def test_the_cache_key_holds_the_global_batch_not_the_gpu_count():
    """The paper's MLM at batch 2048 is one adaptation on 1 GPU (64 × 32 accumulation) or 8 (64 × 4): the same
    entry; the same accumulation on another GPU count is another global batch, another entry."""
    from vtlab.models.mlm import cache_key, global_batch

    start = TinyModernBert()
    recipe = {"steps": 2, "batch_size": 64, "lr": 1e-4, "log_every_n_steps": 50}

    def key(accumulate: int, processes: int) -> str:
        return cache_key(start, {**recipe, "accumulate_grad_batches": accumulate}, None, 0, "32-true", processes)

    assert (
        global_batch({**recipe, "accumulate_grad_batches": 32}, 1)
        == 2048
        == global_batch({**recipe, "accumulate_grad_batches": 4}, 8)
    )
    assert key(32, 1) == key(4, 8) == key(16, 2)
    assert key(4, 1) != key(4, 8)
    assert key(4, 8) != cache_key(
        start, {**recipe, "batch_size": 32, "accumulate_grad_batches": 8}, None, 0, "32-true", 8
    )
