"""Inference-free SPLADE: bag-of-tokens × IDF queries (hand-checked), the query side never runs the network,
IDF gradients only when trainable (own optimizer group), the table follows vocabulary transfer, config + pipeline."""

import json
import math

import pytest
import scipy.sparse as sp
import torch
from helpers import compose_config
from hydra.utils import instantiate
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM

from vtlab.backbones import Backbone, TinyModernBert
from vtlab.core.assets import asset_path
from vtlab.core.errors import VtlabError
from vtlab.data.collections import Collection
from vtlab.evaluation import evaluate
from vtlab.losses import InfoNCE
from vtlab.models.idf import IdfTable
from vtlab.models.inference_free import InferenceFreeEncoder, InferenceFreeModule
from vtlab.regularizers import Flops
from vtlab.stages.pipeline import run
from vtlab.vocab.init import Semantic
from vtlab.vocab.transfer import TransferOptions, apply_transfer

pytestmark = pytest.mark.usefixtures("fresh_cache")
CORPUS = ["apple banana", "apple cherry apple", "banana", "grape"]


def _tiny_bert_encoder(**kwargs) -> InferenceFreeEncoder:
    tok = AutoTokenizer.from_pretrained(str(asset_path("minilm")))
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    return InferenceFreeEncoder(BertForMaskedLM(cfg).eval(), tok, query_max_length=16, doc_max_length=32, **kwargs)


class _NetworkCalls:
    """Counts forward calls of the encoder's MLM network."""

    def __init__(self, encoder):
        self.n = 0
        encoder.model.register_forward_hook(lambda *a: setattr(self, "n", self.n + 1))


def test_query_is_distinct_tokens_times_idf():
    enc = _tiny_bert_encoder()
    enc.fit_idf(CORPUS)
    v = enc.tokenizer.get_vocab()
    q = enc.encode(["apple apple zebra"], side="query", show_progress=False).toarray()[0]
    assert sorted(q.nonzero()[0]) == sorted([v["apple"], v["zebra"]])  # [CLS]/[SEP] weigh 0, apple counted once
    assert q[v["apple"]] == pytest.approx(math.log(2.0), rel=1e-6)
    assert q[v["zebra"]] == pytest.approx(math.log(10.0), rel=1e-6)

    counted = _tiny_bert_encoder(count_repeats=True)
    counted.fit_idf(CORPUS)
    q2 = counted.encode(["apple apple zebra"], side="query", show_progress=False).toarray()[0]
    assert q2[v["apple"]] == pytest.approx(2 * math.log(2.0), rel=1e-6)

    ones = _tiny_bert_encoder(use_idf=False)  # the authors' "woidf": no table, all ones
    assert not ones.needs_idf
    q3 = ones.encode(["apple apple zebra"], side="query", show_progress=False).toarray()[0]
    assert q3[v["apple"]] == q3[v["zebra"]] == 1.0 and q3.sum() == 2.0


def test_special_tokens_weigh_zero_even_with_a_nonzero_table():
    enc = _tiny_bert_encoder()
    tok = enc.tokenizer
    ones = IdfTable.from_corpus(tok, CORPUS)
    ones.weights[:] = 1.0  # a table that (wrongly) weighs the specials
    enc.set_idf(ones)
    ids = tok(["[CLS] [SEP] [MASK] apple"], return_tensors="pt")
    w = enc(ids["input_ids"], ids["attention_mask"], side="query")[0]
    for t in tok.all_special_ids:
        assert w[t] == 0.0
    assert w[tok.convert_tokens_to_ids("apple")] == 1.0 and w.sum() == 1.0


def test_query_without_table_is_a_clear_error():
    enc = _tiny_bert_encoder()
    with pytest.raises(VtlabError, match="no IDF table"):
        enc.encode(["apple"], side="query", show_progress=False)


def test_evaluation_never_runs_the_query_network():
    enc = _tiny_bert_encoder()
    calls = _NetworkCalls(enc)
    col = Collection(
        name="toy",
        corpus={f"d{i}": t for i, t in enumerate(CORPUS)},
        queries={"q1": "apple", "q2": "grape"},
        qrels={"q1": {"d0": 1}, "q2": {"d3": 1}},
    )
    metrics = evaluate(enc, col, batch_size=2, show_progress=False)
    assert calls.n == 2  # 4 documents in batches of 2; queries: none. The IDF came from the collection's corpus.
    assert enc.idf_table is not None and enc.idf_table.n_docs == 4
    assert metrics["encode_query_ms_per_query"] >= 0 and metrics["query_active_dims"] == 1.0
    enc.encode(["what is an apple", "banana split"] * 10, side="query", batch_size=4, show_progress=False)
    assert calls.n == 2


def _module(enc, trainable: bool, idf_lr=1e-2):
    return InferenceFreeModule(
        enc,
        loss=InfoNCE(),
        optimizer=lambda params: torch.optim.AdamW(params, lr=1e-4),
        doc_regularizer=Flops(weight=1e-3),
        trainable_idf=trainable,
        idf_lr=idf_lr,
    )


@pytest.mark.filterwarnings(r"ignore:You are trying to `self.log\(\)`")
@pytest.mark.parametrize("trainable", [False, True])
def test_idf_gradients_flow_only_when_trainable(trainable):
    enc = _tiny_bert_encoder()
    enc.fit_idf(CORPUS)
    module = _module(enc, trainable)
    calls = _NetworkCalls(enc)
    tok = enc.tokenizer
    q = tok(["apple", "grape"], padding=True, return_tensors="pt")
    d = tok(["apple banana", "cherry", "grape", "apple"], padding=True, return_tensors="pt")
    batch = {"query": dict(q), "docs": dict(d)}
    loss = module.training_step(batch, 0)
    assert calls.n == 1  # one network call per step: the documents
    loss.backward()
    groups = module.configure_optimizers().param_groups
    in_optimizer = any(p is enc.idf for g in groups for p in g["params"])
    if not trainable:
        assert enc.idf.grad is None and not in_optimizer
    else:
        grad = enc.idf.grad
        touched = set(grad.nonzero()[:, 0].tolist())
        assert touched == {tok.convert_tokens_to_ids("apple"), tok.convert_tokens_to_ids("grape")}
        (group,) = [g for g in groups if any(p is enc.idf for p in g["params"])]
        assert group["lr"] == 1e-2 and group["weight_decay"] == 0.0 and len(group["params"]) == 1
        assert all(g["lr"] == 1e-4 for g in groups if g is not group)
    assert enc.model.get_output_embeddings().weight.grad is not None  # the document network trains either way


def test_module_rejects_a_query_regularizer_and_untrainable_combinations():
    enc = _tiny_bert_encoder()
    with pytest.raises(VtlabError, match="model.query_regularizer"):
        InferenceFreeModule(enc, loss=InfoNCE(), optimizer=torch.optim.AdamW, query_regularizer=Flops(weight=1e-3))
    with pytest.raises(VtlabError, match="use_idf"):
        InferenceFreeModule(
            _tiny_bert_encoder(use_idf=False), loss=InfoNCE(), optimizer=torch.optim.AdamW, trainable_idf=True
        )


@pytest.mark.slow
def test_idf_table_follows_the_transferred_vocabulary(tmp_path):
    enc = _tiny_bert_encoder()
    enc.fit_idf(CORPUS)
    olmo = TinyModernBert().load_tokenizer()
    model = enc.model
    apply_transfer(
        model, enc.tokenizer, olmo, Semantic(), torch.randn(len(olmo), 16), None, TransferOptions(bias="zeros")
    )
    enc.replace_networks(model, olmo)
    assert enc.needs_idf and enc.idf.shape[0] == enc.vocab_size  # the BERT table is gone, not reindexed
    table = enc.fit_idf(["Apple banana", "apple cherry", "banana"])
    assert table.tokens[: len(olmo)] == [olmo.convert_ids_to_tokens(i) for i in range(len(olmo))]
    enc.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "idf.json").read_text())
    assert set(saved) <= set(olmo.get_vocab()) and "Apple" in saved and "Ġbanana" in saved
    assert "[CLS]" not in saved and olmo.bos_token not in saved
    # a saved model reloads its table from beside the weights
    reloaded = InferenceFreeEncoder.from_backbone(
        Backbone(str(tmp_path)), query_max_length=16, doc_max_length=32
    )  # within the model's 128 positions
    assert not reloaded.needs_idf
    torch.testing.assert_close(reloaded.idf.detach(), torch.relu(enc.idf.detach()))


# ---- configuration and the pipeline --------------------------------------------------------------------------------


def test_model_config_defaults_to_kl_divergence_and_doc_only_regularization(tmp_path):
    cfg = compose_config(["model=inference-free", f"paths.run_dir={tmp_path}"])
    assert cfg.loss._target_ == "vtlab.losses.KLDivergence" and cfg.model.query_regularizer is None
    assert cfg.model.doc_regularizer._target_ == "vtlab.regularizers.Flops"
    assert compose_config(["model=inference-free", "loss=margin-mse"]).loss._target_ == "vtlab.losses.MarginMSE"
    module = instantiate(cfg.model)
    assert isinstance(module, InferenceFreeModule) and module.query_regularizer is None


def test_paper_experiment_composes_with_the_authors_settings(tmp_path):
    cfg = compose_config(["experiment=paper/main/modernbert-vt-inference-free", f"paths.run_dir={tmp_path}"])
    assert cfg.model._target_.endswith("InferenceFreeModule") and cfg.model.encoder.use_idf is False
    assert cfg.loss._target_ == "vtlab.losses.KLDivergence"
    doc = cfg.regularizer.doc
    assert (doc.weight, doc.warmup_steps, doc.threshold) == (0.004, 10000, 150)
    assert cfg.trainer.max_steps == 100000 and cfg.data.batch_size == 20 and cfg.model.optimizer.lr == 2e-5
    assert cfg.data.query_max_length == cfg.data.doc_max_length == 256
    assert cfg.backbone.name_or_path == "answerdotai/ModernBERT-base" and cfg.vocab.name == "bert-uncased"


@pytest.mark.train
def test_pipeline_transferred_tiny_modernbert_inference_free(tmp_path):
    """tiny-modernbert → bert-uncased (semantic) → APC → inference-free fine-tune (trainable IDF) → evaluate: the IDF
    table is computed under the new tokenizer from the training documents, trained, and saved beside the model."""
    cfg = compose_config(
        [
            "backbone=tiny-modernbert",
            "vocab=bert-uncased",
            "init=semantic",
            "apc=p60",
            "model=inference-free",
            "model.trainable_idf=true",
            "model.scheduler.num_warmup_steps=0",
            "baseline=false",
            "logger=none",
            f"paths.run_dir={tmp_path}",
            "trainer.max_steps=2",
            "trainer.val_check_interval=2",
            "data.batch_size=4",
            "data.doc_max_length=64",
            "apc.num_docs=64",
            "apc.max_length=64",
            "data.dev.dev_size=20",
            "data.dev.max_docs=100",
            "data.eval_batch_size=32",
            "+eval.collection.max_queries=40",
            "+eval.collection.max_docs=150",
        ]
    )
    state = run(cfg)
    enc = state["encoder"]
    assert isinstance(enc, InferenceFreeEncoder) and enc.vocab_size == 30522
    report = json.loads((tmp_path / "idf_report.json").read_text())
    assert report["vocab_size"] == 30522 and report["n_docs"] > 1000 and 0 < report["zero_df"] < 30522
    saved = json.loads((tmp_path / "model" / "idf.json").read_text())
    bert = AutoTokenizer.from_pretrained(str(asset_path("minilm"))).get_vocab()
    assert set(saved) <= set(bert) and "the" in saved and "##s" in saved
    # trainable: the saved table moved away from the computed one (Adam, idf_lr 1e-3, 2 steps) on some tokens only
    computed = json.loads((tmp_path / "idf.json").read_text())
    moved = [t for t in computed if abs(saved.get(t, 0.0) - computed[t]) > 1e-5]
    assert 0 < len(moved) < len(computed) // 10
    metrics = json.loads((tmp_path / "eval" / "boolq-clean" / "metrics.json").read_text())["metrics"]
    # a random-init body after 2 steps: its top 10 may hold no relevant passage; what must hold is that the IDF
    # queries and the documents meet in the index (all-zero vectors would rank nothing: R@100 = 0)
    assert 0 <= metrics["nDCG@10"] <= 1 and metrics["R@100"] > 0 and metrics["query_active_dims"] > 1
    q = enc.encode(["is the sky blue"], side="query", show_progress=False)
    assert sp.issparse(q) and q.nnz == 4
