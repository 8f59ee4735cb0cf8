"""Hostile input, round two: evaluation data that cannot measure anything, a byte order mark, ids a TREC run cannot
hold, inputs longer than the model's positions, config values of the wrong kind or range, model directories without
weights or with absurd sizes, an empty triplet file. Each is one `vtlab: error:` line naming the file (+ line) or the
full config key and the value, exit 2, and comes before the expensive part (no model loaded for a config value, no
training or encoding for data).

The direct tests call the checking code; the `_cli_cases` run `python -m vtlab` (in parallel, once).
"""

from __future__ import annotations

import json
import logging
import subprocess
import typing
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from helpers import CONF, compose_config, one_error_line, run_vtlab_together
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, RobertaConfig, RobertaForMaskedLM

from vtlab.backbones import Backbone
from vtlab.backbones.pretrained import check_model_dir, position_limit
from vtlab.core.assets import asset_path
from vtlab.core.errors import AssetError, ConfigError, DataError, config_key, one_line, user_error
from vtlab.data.collections import Collection, judged_queries, load_beir
from vtlab.evaluation import evaluate
from vtlab.models.encoder import SpladeEncoder
from vtlab.runs.checks import CHECKS, ENCODER_PRECISIONS, INDEXES, LIGHTNING_PRECISIONS, check_config, values

pytestmark = pytest.mark.usefixtures("shared_cache")

DOCS = {f"d{i}": f"passage {i} about cats and dogs {i % 3}" for i in range(8)}
QUERIES = {f"q{i}": f"cats {i}" for i in range(4)}
POSITIVE_QRELS = [(f"q{i}", f"d{i}", 1) for i in range(4)]


def write_beir(
    root: Path,
    docs: dict[str, str] = DOCS,
    queries: dict[str, str] = QUERIES,
    qrels: list[tuple[str, str, int]] = POSITIVE_QRELS,
    bom: tuple[str, ...] = (),
) -> Path:
    """A BEIR directory; `bom`: the files (corpus.jsonl, queries.jsonl, qrels/test.tsv) written with a UTF-8 BOM."""
    texts = {
        "corpus.jsonl": "".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in docs.items()),
        "queries.jsonl": "".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items()),
        "qrels/test.tsv": "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in qrels),
    }
    for name, text in texts.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8-sig" if name in bom else "utf-8")
    return root


class Words:
    """A sparse encoder over a fixed word list that records what it was asked to encode."""

    def __init__(self) -> None:
        self.words = sorted({w for t in [*DOCS.values(), *QUERIES.values()] for w in t.split()})
        self.vocab_size = len(self.words)
        self.calls: list[str] = []

    def encode(self, texts, side, batch_size=64, show_progress=True):
        self.calls.append(side)
        return sp.csr_matrix(np.array([[float(w in t.split()) for w in self.words] for t in texts], dtype=np.float32))


def _one_line(exc: BaseException) -> str:
    shown = user_error(exc)
    assert shown is not None, repr(exc)
    line = one_line(shown)
    assert "\n" not in line and line.startswith("vtlab: error: ")
    return line


# ---- 1. qrels whose grades are all 0 -------------------------------------------------------------------------------


def test_qrels_with_no_positive_grade_are_refused_at_load_naming_the_file(tmp_path):
    root = write_beir(tmp_path / "zeros", qrels=[(q, d, 0) for q, d, _ in POSITIVE_QRELS])
    with pytest.raises(DataError) as ei:
        load_beir(str(root))
    qrels = root / "qrels" / "test.tsv"
    assert str(ei.value).startswith(f"{qrels}: no query has a positive grade (all 4 judged (query, doc) pairs")
    _one_line(ei.value)


def test_a_collection_with_no_positive_grade_is_refused_before_encoding():
    """Any loader's collection (here built in memory): refused before a single text is encoded."""
    enc = Words()
    coll = Collection("zeros", DOCS, QUERIES, {q: {d: 0} for q, d, _ in POSITIVE_QRELS})
    with pytest.raises(DataError, match=r"collection 'zeros': no query has a positive relevance grade"):
        evaluate(enc, coll, show_progress=False)
    assert enc.calls == []


def test_queries_graded_only_0_are_left_out_of_the_means_and_not_counted_as_judged(tmp_path, caplog):
    """ir_measures scores a query whose judgments are all 0 as 0 on every measure (and would average it in): such a
    query is not measured, and n_judged_queries counts the queries with a positive grade."""
    qrels = {"q0": {"d0": 1}, "q1": {"d1": 1}, "q2": {"d2": 0}, "q3": {"d3": 0, "d5": 0}}
    with caplog.at_level(logging.WARNING, logger="vtlab.evaluation"):
        m = evaluate(Words(), Collection("mixed", DOCS, QUERIES, qrels), out_dir=tmp_path / "e", show_progress=False)
    assert judged_queries(qrels) == ["q0", "q1"]
    per_query = json.loads((tmp_path / "e" / "per_query.json").read_text())
    assert set(per_query["nDCG@10"]) == {"q0", "q1"}
    assert m["nDCG@10"] == pytest.approx(sum(per_query["nDCG@10"].values()) / 2) and m["nDCG@10"] > 0
    report = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert report["collection"]["n_judged_queries"] == 2 and report["collection"]["n_queries"] == 4
    assert "mixed: 2 of the 4 queries in the qrels have no positive grade" in caplog.text


# ---- 2. a UTF-8 byte order mark ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"])
def test_a_byte_order_mark_is_not_part_of_the_data(tmp_path, name):
    plain = load_beir(str(write_beir(tmp_path / "plain")))
    with_bom = load_beir(str(write_beir(tmp_path / "bom", bom=(name,))))
    assert (with_bom.corpus, with_bom.queries, with_bom.qrels) == (plain.corpus, plain.queries, plain.qrels)
    assert "d0" in with_bom.corpus and "q0" in with_bom.queries  # not '\ufeffd0'


# ---- 3. ids a TREC run cannot hold ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name,line", [("corpus.jsonl", 3), ("queries.jsonl", 2)])
def test_an_id_with_whitespace_is_refused_at_load_naming_file_and_line(tmp_path, name, line):
    docs = {("d 2" if k == "d2" else k): v for k, v in DOCS.items()}
    queries = {("q\t1" if k == "q1" else k): v for k, v in QUERIES.items()}
    root = write_beir(
        tmp_path / "ids",
        docs=docs if name == "corpus.jsonl" else DOCS,
        queries=queries if name == "queries.jsonl" else QUERIES,
    )  # refused before its qrels are read
    bad = "'d 2'" if name == "corpus.jsonl" else "'q\\t1'"
    with pytest.raises(DataError) as ei:
        load_beir(str(root))
    assert str(ei.value).startswith(
        f"{root / name}:{line}: field '_id'={bad} contains whitespace: expected an id without spaces, tabs or newlines"
    )
    _one_line(ei.value)


def test_an_id_with_whitespace_is_refused_before_encoding_when_a_run_is_written(tmp_path):
    enc = Words()
    coll = Collection("spaces", {**DOCS, "doc 9": "x"}, QUERIES, {q: {d: g} for q, d, g in POSITIVE_QRELS})
    with pytest.raises(DataError, match=r"collection 'spaces': document id 'doc 9' is empty or contains whitespace"):
        evaluate(enc, coll, out_dir=tmp_path / "e", show_progress=False)
    assert enc.calls == [] and not (tmp_path / "e").exists()
    evaluate(enc, coll, show_progress=False)  # no run.trec to write: the id harms nothing


# ---- 4. inputs longer than the model's positions -------------------------------------------------------------------


def _tiny(family: str, positions: int) -> tuple[torch.nn.Module, Any]:
    tok = AutoTokenizer.from_pretrained(str(asset_path("minilm")))
    sizes = dict(
        vocab_size=len(tok),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=positions,
    )
    torch.manual_seed(0)
    if family == "roberta":
        return RobertaForMaskedLM(RobertaConfig(**sizes, pad_token_id=1)).eval(), tok
    return BertForMaskedLM(BertConfig(**sizes)).eval(), tok


@pytest.mark.parametrize("family,positions,limit", [("bert", 64, 64), ("roberta", 66, 64)])
def test_position_limit_is_the_longest_input_the_model_runs(family, positions, limit):
    """The derived limit is the real one: `limit` tokens run, one more fails inside the forward pass (RoBERTa-style
    position ids start at pad_token_id + 1, so 66 rows hold 64 tokens)."""
    model, _ = _tiny(family, positions)
    assert position_limit(model)[0] == limit
    ids = torch.full((1, limit), 5)
    model(input_ids=ids, attention_mask=torch.ones_like(ids))
    longer = torch.full((1, limit + 1), 5)
    with pytest.raises((IndexError, RuntimeError)):
        model(input_ids=longer, attention_mask=torch.ones_like(longer))


def test_an_encoder_longer_than_the_model_is_refused_when_built():
    model, tok = _tiny("roberta", 66)
    SpladeEncoder(model, tok, query_max_length=16, doc_max_length=64)
    with pytest.raises(ConfigError) as ei:
        SpladeEncoder(model, tok, query_max_length=16, doc_max_length=65)
    assert str(ei.value).startswith("model.encoder.doc_max_length=65: expected at most 64 tokens")
    assert "max_position_embeddings=66 less the 2 positions up to padding_idx=1" in str(ei.value)
    # the entry point names the key the user sets: model.encoder.doc_max_length is ${data.doc_max_length}
    cfg = compose_config()
    assert config_key(ei.value, cfg) == "data.doc_max_length"
    assert one_line(ei.value, config_key(ei.value, cfg)).endswith(" (config key: data.doc_max_length)")


# ---- 5. typed config, validated before any model loads -------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides,line",
    [
        (["trainer.max_steps=abc"], "trainer.max_steps='abc': expected an integer >= 1 (or -1 for no limit)"),
        (["trainer.max_steps=-5"], "trainer.max_steps=-5: expected an integer >= 1 (or -1 for no limit)"),
        (["trainer.max_steps=1.5"], "trainer.max_steps=1.5: expected an integer >= 1 (or -1 for no limit)"),
        (
            ["trainer.val_check_interval=1.5"],
            "trainer.val_check_interval=1.5: expected an integer >= 1 (batches) or a "
            "number in (0, 1] (a fraction of an epoch), or null",
        ),
        (["trainer.precision=bf17"], "trainer.precision='bf17': expected one of native, 32-true, bf16-mixed,"),
        (["data.batch_size=0"], "data.batch_size=0: expected an integer >= 1"),
        (
            ["data.doc_max_length=two"],
            "data.doc_max_length='two': expected an integer >= 3 (tokens, special ones included)",
        ),
        (["data.num_negatives=-1"], "data.num_negatives=-1: expected an integer >= 0"),
        (["model.encoder.precision=fp16"], "model.encoder.precision='fp16': expected one of auto, native, fp32, bf16"),
        (["seed=-1"], "seed=-1: expected an integer in [0, 4294967295]"),
        (["eval.top_k=0"], "eval.top_k=0: expected an integer >= 1"),
        (
            ["eval=testbed", "eval.evaluations.squad.top_k=0"],
            "eval.evaluations.squad.top_k=0: expected an integer >= 1",
        ),
        (["eval.index=faiss"], "eval.index='faiss': expected one of exact, scipy, seismic"),
        (["apc=p60", "apc.percentile=150"], "apc.percentile=150: expected a number in (0, 100), or null for no APC"),
        (["apc=p60", "apc.num_docs=0"], "apc.num_docs=0: expected an integer >= 1"),
        (["mlm.steps=-1"], "mlm.steps=-1: expected an integer >= 0"),
        (["regularizer.doc.weight=-0.1"], "regularizer.doc.weight=-0.1: expected a finite number >= 0"),
        (["eval=beir", "eval.path=/no/such/beir"], "eval.path='/no/such/beir': expected a BEIR directory (corpus"),
        (
            ["data=jsonl", "data.train.path=/no/such.jsonl"],
            "data.train.path='/no/such.jsonl': expected an existing file",
        ),
    ],
)
def test_config_values_are_checked_by_full_key_and_value(overrides, line):
    with pytest.raises(ConfigError) as ei:
        check_config(compose_config(overrides))
    assert str(ei.value).startswith(line), str(ei.value)
    assert ei.value.key == line.split("=")[0]
    _one_line(ei.value)


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["trainer.max_steps=-1"],
        ["trainer.val_check_interval=0.25"],
        ["trainer.precision=bf16-mixed"],
        ["trainer.precision=32"],
        ["regularizer=none"],
        ["eval=none"],
        ["eval=beir"],
        ["data=jsonl"],
        ["apc=off"],
        ["trainer.gradient_clip_val=null"],
    ],
)
def test_good_values_pass_and_unset_keys_are_left_to_their_readers(overrides):
    check_config(compose_config(overrides))  # eval=beir / data=jsonl: a `???` path is reported by whoever reads it


EXPERIMENTS = sorted(
    str(p.relative_to(CONF / "experiment").with_suffix("")) for p in (CONF / "experiment").rglob("*.yaml")
)


@pytest.mark.slow
def test_every_experiment_config_passes_the_checks():
    assert len(EXPERIMENTS) > 40
    failed = {}
    for name in EXPERIMENTS:
        try:
            check_config(compose_config([f"experiment={name}", "paths.run_dir=/tmp/x"]))
        except ConfigError as e:
            failed[name] = str(e)
    assert failed == {}


GROUP_OPTIONS = [
    f"{group.name}={p.stem}"
    for group in sorted(CONF.iterdir())
    if group.is_dir() and group.name not in ("experiment", "hydra", "paths", "tables")  # tables: vtlab.reproduce's
    for p in sorted(group.glob("*.yaml"))
]


@pytest.mark.slow
def test_every_config_group_option_passes_the_checks():
    failed = {}
    for option in GROUP_OPTIONS:
        try:
            check_config(compose_config([option]))
        except ConfigError as e:
            failed[option] = str(e)
    assert failed == {}


def test_every_checked_key_exists_in_some_config():
    """A key of the table that no config has would never be checked (a typo there passes silently)."""
    assert len(CHECKS) > 40
    cfgs = [
        compose_config(o)
        for o in (
            [],
            ["eval=beir", "eval.path=x"],
            ["apc=p60"],
            ["model=inference-free"],
            ["data=jsonl", "data.train.path=x", "data.dev_path=x"],
            ["trainer=ddp"],
            ["experiment=paper/main/bert-native", "paths.run_dir=x"],
            ["eval=testbed", "+eval.evaluations.squad.index=scipy"],
            ["stage=export"],
        )
    ]
    assert [key for key in CHECKS if not any(list(values(cfg, key)) for cfg in cfgs)] == []


def test_the_checks_choices_are_the_codes_own():
    from lightning_fabric.connector import _PRECISION_INPUT

    from vtlab.index import index_names
    from vtlab.runtime.precision import PRECISIONS

    lightning = {v for literal in typing.get_args(_PRECISION_INPUT) for v in typing.get_args(literal)}
    ours = {"native"}  # vtlab.runtime.precision.trainer_precision resolves it to one of Lightning's before the Trainer
    assert set(LIGHTNING_PRECISIONS) == lightning | ours and len(LIGHTNING_PRECISIONS) == len(lightning) + len(ours)
    assert ENCODER_PRECISIONS == PRECISIONS and INDEXES == index_names()


# ---- 6. model directories: no weights, missing shards, absurd sizes ------------------------------------------------


def _model_dir(tmp: Path, skip: tuple[str, ...] = (), **config: Any) -> Path:
    """A copy of the SPLADE-tiny directory without the files in `skip`, config.json updated with `config`."""
    src = Path(Backbone("asset:splade-tiny")._source(tokenizer=False)[0])
    tmp.mkdir(parents=True)
    for f in src.iterdir():
        if f.is_file() and f.name not in (*skip, "config.json"):
            (tmp / f.name).symlink_to(f)
    data = json.loads((src / "config.json").read_text())
    (tmp / "config.json").write_text(json.dumps({**data, **config}))
    return tmp


def test_a_model_directory_without_weights_is_named_before_loading(tmp_path):
    root = _model_dir(tmp_path / "m", skip=("model.safetensors",))
    with pytest.raises(AssetError) as ei:
        Backbone(str(root)).load_model()
    assert str(ei.value) == (
        f"{root}: no model weights: expected model.safetensors (or a sharded model.safetensors.index.json with its "
        "shards) beside config.json (config key: backbone.name_or_path)"
    )


def test_a_sharded_model_with_a_missing_shard_names_it(tmp_path):
    root = _model_dir(tmp_path / "m", skip=("model.safetensors",))
    (root / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})
    )
    (root / "model-00001-of-00002.safetensors").write_bytes(b"")
    with pytest.raises(
        AssetError,
        match=r"model\.safetensors\.index\.json: names model-00002-of-00002\.safetensors, "
        r"which is missing from .*/m \(1 shard\(s\) missing",
    ):
        check_model_dir(str(root), "backbone.name_or_path")


def test_a_model_directory_without_config_json_is_named(tmp_path):
    root = _model_dir(tmp_path / "m")
    (root / "config.json").unlink()
    with pytest.raises(AssetError, match=r"/m/config\.json: missing: a model directory needs config\.json"):
        Backbone(str(root)).load_model()


@pytest.mark.parametrize(
    "key,value,words",
    [
        (
            "vocab_size",
            1_000_000_000,
            "vocab_size=1000000000: its word-embedding table (1000000000 × hidden_size=128 × 4 "
            "bytes = 476.84 GiB) is larger than this machine's 64.00 GiB of memory",
        ),
        ("max_position_embeddings", 10**9, "max_position_embeddings=1000000000: its position-embedding table"),
        ("hidden_size", 0, "hidden_size=0: expected a positive integer"),
        ("num_hidden_layers", "2", "num_hidden_layers='2': expected a positive integer"),
    ],
)
def test_absurd_sizes_in_config_json_are_named_by_file_and_key(tmp_path, key, value, words):
    root = _model_dir(tmp_path / "m", **{key: value})
    with pytest.raises(AssetError) as ei:
        check_model_dir(str(root), "backbone.name_or_path", memory=64 * 2**30)
    assert str(ei.value).startswith(f"{root / 'config.json'}: {words}"), str(ei.value)


def test_sizes_that_do_not_fit_the_weights_name_config_json(tmp_path):
    """A plausible but wrong size passes the memory bound; transformers' size mismatch is then one line too."""
    root = _model_dir(tmp_path / "m", vocab_size=40000)
    with pytest.raises(AssetError) as ei:
        Backbone(str(root)).load_model()
    assert str(ei.value).startswith(f"{root / 'config.json'}: the weights do not fit this config: tensor shapes differ")


# ---- through the CLI: exit 2, one `vtlab: error:` line, no traceback, nothing expensive done first -----------------

_BASE = ["backbone=splade-tiny", "vocab=native", "apc=off", "baseline=false", "logger=none"]
# fp32: precision=auto would time its probe in each of these processes at once (nothing these cases are about)
_EVAL = [*_BASE, "stage=evaluate", "eval=beir", "model.encoder.precision=fp32"]
GOOD = {"query": "what is a cat", "positive": "a cat is an animal", "negatives": ["dogs bark", "fish swim"]}


def _cli_cases(tmp: Path) -> dict[str, tuple[list[str], list[str]]]:
    """id → (overrides, strings the error line must contain; [] for a run that must succeed)."""
    zeros = write_beir(tmp / "data" / "zeros", qrels=[(q, d, 0) for q, d, _ in POSITIVE_QRELS])
    bom = write_beir(tmp / "data" / "bom", bom=("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"))
    spaced = write_beir(tmp / "data" / "spaced", docs={**DOCS, "doc 9": "x"})
    train = tmp / "data" / "train.jsonl"
    train.write_text("".join(json.dumps(GOOD) + "\n" for _ in range(8)))
    empty = tmp / "data" / "empty.jsonl"
    empty.write_text("")
    no_weights = _model_dir(tmp / "data" / "no-weights", skip=("model.safetensors",))
    huge = _model_dir(tmp / "data" / "huge", vocab_size=10**12)  # absurd on any machine

    def finetune(triplets: Path) -> list[str]:
        return [
            *_BASE,
            "stage=finetune",
            "data=jsonl",
            f"data.train.path={triplets}",
            "data.batch_size=4",
            "trainer.max_steps=2",
            "trainer.limit_val_batches=0",
            "eval=none",
        ]

    return {
        "qrels_all_zero": (
            [*_EVAL, f"eval.path={zeros}"],
            [f"{zeros}/qrels/test.tsv: no query has a positive grade (all 4 judged (query, doc) pairs"],
        ),
        "bom_in_every_file": ([*_EVAL, f"eval.path={bom}"], []),
        "doc_id_with_a_space": (
            [*_EVAL, f"eval.path={spaced}"],
            [f"{spaced}/corpus.jsonl:9: field '_id'='doc 9' contains whitespace"],
        ),
        "doc_max_length_past_the_model": (
            [*finetune(train), "data.doc_max_length=4096"],
            [
                "model.encoder.doc_max_length=4096: expected at most 512 tokens",
                "(max_position_embeddings=512) (config key: data.doc_max_length)",
            ],
        ),
        "max_steps_not_a_number": (
            [*finetune(train), "trainer.max_steps=abc"],
            ["trainer.max_steps='abc': expected an integer >= 1 (or -1 for no limit)"],
        ),
        "max_steps_negative": (
            [*finetune(train), "trainer.max_steps=-5"],
            ["trainer.max_steps=-5: expected an integer >= 1 (or -1 for no limit)"],
        ),
        "model_dir_without_weights": (
            [*_EVAL, f"eval.path={bom}", f"backbone.name_or_path={no_weights}"],
            [f"{no_weights}: no model weights: expected model.safetensors (or a sharded"],
        ),
        "absurd_vocab_size": (
            [*_EVAL, f"eval.path={bom}", f"backbone.name_or_path={huge}"],
            [f"{huge}/config.json: vocab_size=1000000000000: its word-embedding table"],
        ),
        "empty_triplet_file": (finetune(empty), [f"{empty}: the triplet file is empty"]),
    }


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path, list[str]]]:
    tmp = tmp_path_factory.mktemp("cli2")
    cases = _cli_cases(tmp)
    assert sorted(cases) == sorted(CLI_NAMES)
    done = run_vtlab_together(
        {name: [*overrides, f"hydra.run.dir={tmp / name}"] for name, (overrides, _) in cases.items()}, timeout=600
    )
    return {name: (done[name], tmp / name, cases[name][1]) for name in cases}


CLI_NAMES = [
    "qrels_all_zero",
    "bom_in_every_file",
    "doc_id_with_a_space",
    "doc_max_length_past_the_model",
    "max_steps_not_a_number",
    "max_steps_negative",
    "model_dir_without_weights",
    "absurd_vocab_size",
    "empty_triplet_file",
]
# config values: refused before the run starts (no status.json: no stage ran, no model was loaded)
BEFORE_THE_RUN = {"max_steps_not_a_number", "max_steps_negative"}


@pytest.mark.cli
@pytest.mark.parametrize("name", [n for n in CLI_NAMES if n != "bom_in_every_file"])
def test_cli_exits_2_with_one_line_before_the_expensive_part(cli_runs, name):
    res, run_dir, expected = cli_runs[name]
    assert res.returncode == 2, res.stderr[-3000:]
    one_error_line(res.stderr, expected)
    # nothing expensive ran first: no training step (no checkpoint), no text encoded (no eval output)
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "eval").exists()
    assert "encode queries" not in res.stderr and "encode docs" not in res.stderr
    assert (run_dir / "status.json").exists() is (name not in BEFORE_THE_RUN)


@pytest.mark.cli
def test_cli_reads_beir_files_with_a_byte_order_mark(cli_runs):
    res, run_dir, _ = cli_runs["bom_in_every_file"]
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads((run_dir / "eval" / "bom" / "metrics.json").read_text())
    assert report["collection"] == {"name": "bom", "n_docs": 8, "n_queries": 4, "n_judged_queries": 4}
    assert report["metrics"]["nDCG@10"] > 0
