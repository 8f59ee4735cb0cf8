"""A run is named after the data its stage reads (conf/stage/*.yaml `data`, conf/config.yaml `name`), not after an
evaluation set it never reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import compose_config

from vtlab.core.paths import CONF_DIR

STAGES = sorted(p.stem for p in (Path(CONF_DIR) / "stage").glob("*.yaml"))


def _name(tmp_path: Path, *overrides: str) -> str:
    return compose_config([*overrides, f"paths.run_dir={tmp_path}"]).name


def test_a_diagnosed_corpus_names_the_run(tmp_path):
    corpus = tmp_path / "support-tickets.jsonl"
    name = _name(tmp_path, "stage=diagnose", f"diagnose.corpus.path={corpus}")
    assert name == "diagnose-splade-tiny-corpus-wordpiece-support-tickets"
    assert "boolq" not in name


def test_a_diagnosed_beir_corpus_is_named_by_its_directory(tmp_path):
    name = _name(tmp_path, "stage=diagnose", "vocab=native", f"diagnose.corpus.path={tmp_path}/scifact/corpus.jsonl")
    assert name == "diagnose-splade-tiny-native-scifact"


def test_diagnose_of_the_training_data_and_of_the_default_corpus(tmp_path):
    triplets = tmp_path / "my-triplets.jsonl"
    assert _name(
        tmp_path, "stage=diagnose", "diagnose.corpus.from_data=true", "data=jsonl", f"data.train.path={triplets}"
    ).endswith("-my-triplets")
    # the default corpus: BoolQ passages (vtlab.diagnose.corpus.corpus_name), not BoolQ-clean's evaluation set
    assert _name(tmp_path, "stage=diagnose").endswith("-boolq")


def test_the_full_pipeline_keeps_its_evaluation_set(tmp_path):
    assert _name(tmp_path) == "all-splade-tiny-corpus-wordpiece-boolq-clean"
    assert _name(tmp_path, "stage=evaluate", "vocab=native") == "evaluate-splade-tiny-native-boolq-clean"


def test_a_custom_eval_path_names_the_run_by_its_directory(tmp_path):
    beir = tmp_path / "pydocs"
    assert _name(tmp_path, "eval=beir", f"eval.path={beir}/") == "all-splade-tiny-corpus-wordpiece-pydocs"
    assert _name(tmp_path, "stage=encode", "eval=beir", f"eval.path={beir}").endswith("-pydocs")


def test_training_alone_is_named_after_its_triplets_not_the_eval(tmp_path):
    triplets = tmp_path / "mine.jsonl"
    assert _name(tmp_path, "stage=finetune", "data=jsonl", f"data.train.path={triplets}").endswith("-mine")
    assert not _name(tmp_path, "stage=finetune").endswith("boolq-clean")  # it never reads the eval set
    assert _name(tmp_path, "stage=transfer") == "transfer-splade-tiny-corpus-wordpiece"


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_declares_the_data_it_reads(tmp_path, stage):
    cfg = compose_config([f"stage={stage}", f"paths.run_dir={tmp_path}"])
    assert "data" in cfg.stage, f"conf/stage/{stage}.yaml declares no `data`"
    data = cfg.stage.data
    assert cfg.name == f"{stage}-splade-tiny-corpus-wordpiece" + (f"-{data}" if data else "")
