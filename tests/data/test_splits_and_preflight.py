"""A dev set never overlaps its training set (questions, or gold passages the model trained on as positives),
the evaluation data of `stage=all` is checked before training starts, and a resume reads the inputs its run started
with. Each refusal is one `vtlab: error:` line naming the config keys or the file.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from helpers import CONF, compose_config
from hydra.utils import instantiate

from vtlab.core.errors import DataError, RunDirError, VtlabError, config_key, one_line, user_error
from vtlab.data.collections import Collection
from vtlab.data.examples import TripletExample
from vtlab.data.overlap import check_disjoint, normalize
from vtlab.runs.inputs import INPUTS_JSON, difference, fingerprint
from vtlab.stages.admission import admit

pytestmark = pytest.mark.usefixtures("shared_cache")

_FAST = [
    "backbone=splade-tiny",
    "vocab=native",
    "apc=off",
    "baseline=false",
    "logger=none",
    "data.batch_size=2",
    "data.doc_max_length=32",
    "data.query_max_length=16",
    "trainer.max_steps=2",
    "trainer.limit_val_batches=0",
    "callbacks.last_checkpoint.every_n_train_steps=1",
    "model.encoder.precision=fp32",
]


def _error_line(exc: BaseException) -> str:
    shown = user_error(exc)
    assert shown is not None, repr(exc)
    line = one_line(shown)
    assert "\n" not in line, line
    return line


def _setup(overrides: list[str]):
    dm = instantiate(compose_config(overrides).data)
    dm.setup("fit")
    return dm


def _beir(
    root: Path,
    queries: dict[str, str],
    docs: dict[str, str],
    qrels: dict[str, dict[str, int]],
    split: str = "test",
    files: tuple[str, ...] = ("corpus.jsonl", "queries.jsonl", "qrels"),
) -> Path:
    (root / "qrels").mkdir(parents=True)
    texts = {
        "corpus.jsonl": "".join(json.dumps({"_id": d, "text": t}) + "\n" for d, t in docs.items()),
        "queries.jsonl": "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()),
        "qrels": "".join(f"{q}\t{d}\t{g}\n" for q, rels in qrels.items() for d, g in rels.items()),
    }
    for name, text in texts.items():
        if name in files:
            (root / (f"qrels/{split}.tsv" if name == "qrels" else name)).write_text(text)
    return root


def _triplets(path: Path, rows: list[tuple[str, str, list[str]]]) -> Path:
    path.write_text("".join(json.dumps({"query": q, "positive": p, "negatives": n}) + "\n" for q, p, n in rows))
    return path


TRAIN = [
    ("what do owls eat", "Owls eat mice and insects.", ["Cats sleep a lot.", "Rain falls in spring."]),
    ("where do cats sleep", "Cats sleep a lot.", ["Owls eat mice and insects.", "Snow melts in April."]),
    ("when does snow melt", "Snow melts in April.", ["Rain falls in spring.", "Cats sleep a lot."]),
    ("why is the sky blue", "Light scatters in the air.", ["Snow melts in April.", "Owls eat mice and insects."]),
]


# ---- 1. splits never overlap ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides,expected",
    [
        # the dev split larger than the part training holds out: the extra 200 dev questions are training questions
        (
            ["data.dev.dev_size=500"],
            (
                "data.dev.dev_size=500 vs data.train.dev_size=300: 200 of 500 dev questions are "
                "training questions (e.g. 't28' of boolq-dev: "
            ),
        ),
        # the same, on a 200-question training sample (seed 1: 4 of the 200 sampled questions are among the 200 extra)
        (
            ["seed=1", "data.dev.dev_size=500", "+data.train.max_examples=200"],
            "data.dev.dev_size=500 vs data.train.dev_size=300: 4 of 500 dev questions are training questions",
        ),
        # the dev split drawn with another seed than the training split
        (
            ["data.dev.seed=1"],
            (
                "data.dev.seed=1 vs data.train.seed=0: 290 of 300 dev questions are training questions "
                "(e.g. 't5' of boolq-dev: "
            ),
        ),
    ],
)
def test_boolq_splits_that_overlap_are_refused_naming_the_keys(overrides, expected):
    with pytest.raises(DataError) as ei:
        _setup(["data=boolq", *overrides])
    line = _error_line(ei.value)
    assert line.startswith(f"vtlab: error: {expected}"), line
    assert line.endswith("a dev set must hold questions training never saw"), line


def test_a_user_dev_set_sharing_a_question_is_refused(tmp_path):
    train = _triplets(tmp_path / "t.jsonl", TRAIN)
    dev = _beir(
        tmp_path / "mydev",
        {"q1": "Where do  CATS sleep", "q2": "how tall is a giraffe"},
        {"d1": "Cats doze on sofas.", "d2": "Giraffes grow to five metres."},
        {"q1": {"d1": 1}, "q2": {"d2": 1}},
        split="dev",
    )
    with pytest.raises(DataError) as ei:
        _setup(["data=jsonl", f"data.train.path={train}", f"data.dev_path={dev}"])
    assert _error_line(ei.value) == (
        f"vtlab: error: data.dev_path={dev} vs data.train.path={train}: 1 of 2 dev "
        "questions are training questions (e.g. 'q1' of mydev: 'Where do CATS sleep'); "
        "a dev set must hold questions training never saw"
    )


def test_a_user_dev_set_whose_gold_passage_is_a_training_positive_is_refused(tmp_path):
    train = _triplets(tmp_path / "t.jsonl", TRAIN)
    # a new question, but its relevant passage is a training positive (up to case and spacing)
    dev = _beir(
        tmp_path / "mydev",
        {"q1": "what does an owl hunt", "q2": "how tall is a giraffe"},
        {"d1": "owls  eat mice and INSECTS.", "d2": "Giraffes grow to five metres."},
        {"q1": {"d1": 1}, "q2": {"d2": 1}},
        split="dev",
    )
    with pytest.raises(DataError) as ei:
        _setup(["data=jsonl", f"data.train.path={train}", f"data.dev_path={dev}"])
    line = _error_line(ei.value)
    assert line.startswith(
        f"vtlab: error: data.dev_path={dev} vs data.train.path={train}: 1 of 2 dev gold passages "
        "are training positives (e.g. 'd1', relevant to dev question 'q1' of mydev: "
    ), line
    assert "memorisation" in line


def test_a_dev_gold_passage_seen_only_as_a_training_negative_is_allowed_with_a_warning(tmp_path, caplog):
    train = _triplets(tmp_path / "t.jsonl", TRAIN)
    # 'Rain falls in spring.' is only ever a negative in TRAIN; an unjudged dev passage may be anything training saw
    dev = _beir(
        tmp_path / "mydev",
        {"q1": "when does it rain", "q2": "how tall is a giraffe"},
        {"d1": "Rain falls in spring.", "d2": "Giraffes grow to five metres.", "d3": "Cats sleep a lot."},
        {"q1": {"d1": 1, "d3": 0}, "q2": {"d2": 1}},
        split="dev",
    )
    with caplog.at_level(logging.WARNING, logger="vtlab"):
        dm = _setup(["data=jsonl", f"data.train.path={train}", f"data.dev_path={dev}"])
    assert dm.dev_collection is not None and len(dm.dev_collection.queries) == 2
    assert "1 of 2 dev gold passages are training negatives (e.g. 'd1' of mydev); allowed" in caplog.text


def test_the_check_counts_every_dev_question_and_passage_in_normalized_form():
    train = [TripletExample(q, p, n) for q, p, n in TRAIN]
    dev = Collection(
        "d",
        {"a": "CATS sleep  a lot.", "b": "x"},
        {"q1": "why is the  sky blue", "q2": "WHY IS THE SKY BLUE", "q3": "new"},
        {"q3": {"a": 1, "b": 0}},
    )
    with pytest.raises(
        DataError,
        match=r"^data\.dev vs data\.train: 2 of 3 dev questions are training questions "
        r"\(e\.g\. 'q1' of d: ",
    ):
        check_disjoint(dev, train)
    dev.queries = {"q3": "new"}
    with pytest.raises(DataError, match=r"^data\.dev vs data\.train: 1 of 1 dev gold passages are training positives"):
        check_disjoint(dev, train)
    assert normalize(" A\u00a0b\tC\n") == "a b c"  # every Unicode space, as the cleaning's regex did


def _shipped_data() -> list[str]:
    return sorted(p.stem for p in (CONF / "data").glob("*.yaml"))


def _experiments() -> list[str]:
    return sorted(
        str(p.relative_to(CONF / "experiment").with_suffix("")) for p in (CONF / "experiment").rglob("*.yaml")
    )


# a dev split → the training set drawn from the same questions, which must hold the same questions out
SAME_SPLIT = {
    "vtlab.data.boolq.boolq_collection": "vtlab.data.boolq.boolq_triplets",
    "vtlab.data.clean.boolq_clean_collection": "vtlab.data.clean.boolq_clean_triplets",
}


@pytest.mark.slow
def test_every_shipped_config_draws_dev_and_training_from_one_split():
    """Every data config and experiment: a BoolQ dev split goes with training on the same split (the same dev_size and
    seed, so the realized checks below hold for every seed a sweep passes) or with other data (MS MARCO)."""
    pairs = set()
    datas = [
        (o, compose_config(o).data)
        for o in [[f"data={d}"] for d in _shipped_data()] + [[f"experiment={e}"] for e in _experiments()]
    ]
    for overrides, data in datas:
        dev_target = data.dev.get("_target_") if data.dev is not None else None
        pairs.add((str(data.train._target_), str(dev_target)))
        if dev_target not in SAME_SPLIT:
            continue  # no dev set, the user's, or the hub's
        if data.train._target_ == SAME_SPLIT[dev_target]:
            assert [data.dev[k] for k in ("dev_size", "seed")] == [data.train[k] for k in ("dev_size", "seed")], (
                overrides
            )
        else:
            assert str(data.train._target_).startswith("vtlab.data.hf."), overrides  # MS MARCO: other questions
    assert {(train, dev) for dev, train in SAME_SPLIT.items()} <= pairs


@pytest.mark.slow
@pytest.mark.parametrize("data", _shipped_data())
def test_shipped_data_configs_pass_the_check(data, tmp_path, caplog):
    if data.startswith("msmarco"):
        pytest.skip("hub data (MS MARCO): not built offline; its BoolQ dev questions are no MS MARCO queries")
    overrides = [f"data={data}"]
    if data == "jsonl":
        dev = _beir(
            tmp_path / "dev",
            {"q1": "how tall is a giraffe"},
            {"d1": "Giraffes grow to five metres."},
            {"q1": {"d1": 1}},
            split="dev",
        )
        overrides += [f"data.train.path={_triplets(tmp_path / 't.jsonl', TRAIN)}", f"data.dev_path={dev}"]
    with caplog.at_level(logging.WARNING, logger="vtlab"):
        dm = _setup(overrides)
    assert dm.dev_collection is not None and dm.train_examples
    assert "dev gold passages are training negatives" not in caplog.text  # disjoint in every role, not just allowed


@pytest.mark.parametrize("seed", [1, 2])
def test_the_boolq_split_is_passage_disjoint_for_the_seeds_sweeps_use(seed):
    """What boolq_triplets trains on for other seeds, without mining: no dev question, no dev gold passage among the
    training questions' passages (positives) or in the negative pool."""
    from vtlab.data.boolq import split_dev, train_pairs

    pairs = train_pairs()
    train_idx, dev_idx = split_dev(300, seed)
    dev_passages = {normalize(pairs[i][1]) for i in dev_idx}
    assert len(dev_idx) == 300 and len(train_idx) == len(pairs) - 300
    assert not dev_passages & {normalize(pairs[i][1]) for i in train_idx}


# ---- 2. stage=all checks the evaluation data before training ------------------------------------------------------


@pytest.mark.parametrize(
    "name,expected",
    [
        ("qrels_all_zero", "/qrels/test.tsv: no query has a positive grade (all 1 judged (query, doc) pairs"),
        # the layout is one of the config checks, before the data is read
        ("no_corpus", "': expected a BEIR directory (corpus.jsonl, queries.jsonl and qrels/<split>.tsv in it)"),
    ],
)
def test_stage_all_with_a_broken_eval_dir_is_refused_before_training(tmp_path, name, expected):
    """The run's admission (vtlab.stages.admission) of `python -m vtlab stage=all ...`: the line the CLI prints, and
    nothing of the run written or started (the data module, the model load and the training come after it)."""
    train = _triplets(tmp_path / "t.jsonl", TRAIN)
    docs, queries = {"d1": "Giraffes grow to five metres.", "d2": "x"}, {"q1": "how tall is a giraffe"}
    eval_dir = {
        "qrels_all_zero": lambda: _beir(tmp_path / "zeros", queries, docs, {"q1": {"d1": 0}}),
        "no_corpus": lambda: _beir(
            tmp_path / "nocorpus", queries, docs, {"q1": {"d1": 1}}, files=("queries.jsonl", "qrels")
        ),
    }[name]()
    run_dir = tmp_path / "runs" / name
    cfg = compose_config(
        [
            *_FAST,
            "stage=all",
            "data=jsonl",
            f"data.train.path={train}",
            "eval=beir",
            f"eval.path={eval_dir}",
            f"paths.run_dir={run_dir}",
        ]
    )
    started = []
    with pytest.raises(VtlabError) as ei, admit(cfg, on_start=lambda: started.append(True)):
        pass
    line = one_line(ei.value, config_key(ei.value, cfg))  # what pipeline.run_or_exit prints
    assert line.startswith("vtlab: error: ") and "\n" not in line and expected in line and str(eval_dir) in line
    # no status.json, inputs record, checkpoint or model (a config check refuses before the directory is made)
    assert started == [] and (not run_dir.exists() or list(run_dir.iterdir()) == [])


# ---- 3. a resume reads the inputs its run started with ------------------------------------------------------------


def _snapshot(root: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and not str(p.relative_to(root)).startswith(skip)
    }


def _finetune_cfg(run_dir: Path, train: Path, *more: str):
    return compose_config(
        [*_FAST, "stage=finetune", "data=jsonl", f"data.train.path={train}", f"paths.run_dir={run_dir}", *more]
    )


def _admit(cfg) -> None:
    """The run's admission in process (vtlab.stages.admission): every check, then the run's first writes."""
    with admit(cfg):
        pass


def test_a_resume_on_a_changed_triplet_file_is_refused_and_changes_nothing(tmp_path):
    import torch

    from vtlab.runs.resume import run_config

    train = _triplets(tmp_path / "t.jsonl", TRAIN)
    run_dir = tmp_path / "run"
    _admit(_finetune_cfg(run_dir, train))  # a fresh run: records its inputs
    recorded = json.loads((run_dir / INPUTS_JSON).read_text())["files"]
    assert recorded[str(train.resolve())]["key"] == "data.train.path"
    (run_dir / "checkpoints").mkdir()
    record = {"callbacks": {"ResumeState": {"configs": [run_config(_finetune_cfg(run_dir, train))]}}}
    torch.save(record, run_dir / "checkpoints" / "last.ckpt")  # an interrupted run with the same config
    _admit(_finetune_cfg(run_dir, train))  # the same inputs: resumes
    os.utime(train, ns=(1, 1))
    _admit(_finetune_cfg(run_dir, train))  # a touch (same content) is the same input
    before = _snapshot(run_dir)
    _triplets(train, TRAIN[:3])
    with pytest.raises(RunDirError) as ei:
        _admit(_finetune_cfg(run_dir, train))
    line = _error_line(ei.value)
    assert line.startswith(f"vtlab: error: {train.resolve()} (data.train.path) changed (size "), line
    assert f"since the interrupted run in {run_dir} started" in line and "resume_with_changes=true" in line
    assert _snapshot(run_dir) == before
    _admit(_finetune_cfg(run_dir, train, "resume_with_changes=true"))  # asked for: continues, recorded anew
    files = json.loads((run_dir / INPUTS_JSON).read_text())["files"]
    assert files[str(train.resolve())]["size"] == train.stat().st_size


def test_a_large_file_counts_as_changed_when_its_mtime_moves(tmp_path):
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"a" * (65 * 2**20))
    old = fingerprint(big)
    assert "sha256" not in old and old["sha256_first_mib"] == old["sha256_last_mib"]
    os.utime(big, ns=(1, 1))
    assert "an edit in between cannot be ruled out" in difference(old, fingerprint(big))
    small = tmp_path / "small.jsonl"
    small.write_text("x\n")
    fp = fingerprint(small)
    os.utime(small, ns=(1, 1))
    assert difference(fp, fingerprint(small)) is None


@pytest.mark.train
def test_a_real_runs_record_refuses_a_resume_whose_triplets_changed(tmp_path):
    """A real 2-step fine-tuning (the pipeline in process), its triplet file edited, the same run admitted again:
    refused from what the run itself recorded (its checkpoint's config, .hydra/inputs.json), nothing changed."""
    from vtlab.stages.pipeline import run

    train = _triplets(tmp_path / "t.jsonl", TRAIN)
    run_dir = tmp_path / "run"
    # loss.in_batch_positives given as a value, not conf/'s `${oc.select:...}`: the checkpoint records the config as
    # the fine-tuning stage sees it (the interpolation resolved), and this test is about the inputs, not that key
    more = ["eval=none", "loss.in_batch_positives=true"]
    run(_finetune_cfg(run_dir, train, *more))  # trains 2 steps; stage=finetune writes no metrics: resumable
    assert (run_dir / "checkpoints" / "last.ckpt").is_file() and (run_dir / INPUTS_JSON).is_file()
    before = _snapshot(run_dir)
    _triplets(train, [*TRAIN, ("is it new", "A new passage.", ["Snow melts in April."])])
    started = []
    with pytest.raises(RunDirError) as ei, admit(_finetune_cfg(run_dir, train, *more), lambda: started.append(1)):
        pass
    line = _error_line(ei.value)
    assert line.startswith(f"vtlab: error: {train.resolve()} (data.train.path) changed (size "), line
    assert "resume_with_changes=true" in line and started == []
    assert _snapshot(run_dir) == before  # checkpoints, the inputs record: as they were


def test_a_dev_set_sharing_the_evaluation_corpus_gets_one_warning_with_counts(caplog):
    """One BEIR directory with dev and test qrels (a common layout): dev and evaluation share the corpus."""
    import logging

    from vtlab.data.collections import Collection
    from vtlab.data.preflight import warn_dev_overlap

    corpus = {f"d{i}": f"Passage number {i}." for i in range(10)}
    dev = Collection("mine", corpus, {"q1": "first question"}, {"q1": {"d1": 1}})
    test = Collection("mine", corpus, {"q2": "second question", "q3": "First  question"}, {"q2": {"d2": 1}})
    apart = Collection("other", {"x": "another text"}, {"q": "another question"}, {"q": {"x": 1}})
    with caplog.at_level(logging.WARNING, logger="vtlab"):
        warn_dev_overlap(dev, [test, apart], "/data/mine")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "data.dev_path=/data/mine shares 10 of the evaluation set mine's 10 passages and 1 of its 2 questions: "
        "checkpoints chosen on dev see the evaluation's texts; give dev its own corpus for a clean evaluation"
    ]


def test_a_vocabulary_learned_on_the_evaluation_corpus_is_said(tmp_path, caplog):
    import logging

    from omegaconf import OmegaConf

    from vtlab.data.preflight import warn_vocab_on_eval_corpus

    (tmp_path / "mine").mkdir()
    same = OmegaConf.create(
        {
            "vocab": {"corpus": {"path": str(tmp_path / "mine" / "corpus.jsonl")}},
            "eval": {"path": str(tmp_path / "mine") + "/"},
        }
    )
    other = OmegaConf.create(
        {"vocab": {"corpus": {"path": str(tmp_path / "texts.txt")}}, "eval": {"path": str(tmp_path / "mine")}}
    )
    with caplog.at_level(logging.WARNING, logger="vtlab"):
        warn_vocab_on_eval_corpus(other.vocab.corpus.path, other.eval.path)
        warn_vocab_on_eval_corpus(None, None)  # vocab=bert-uncased: no corpus
        assert not caplog.records
        warn_vocab_on_eval_corpus(same.vocab.corpus.path, same.eval.path)
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"vocab.corpus.path and eval.path are the same collection ({tmp_path / 'mine'})")
