"""Teacher scores for distillation (vtlab/data/teacher.py): each score is the teacher's sparse dot product of the query
and the passage, checked against SPLADE computed by hand from the Hugging Face masked-LM; the teacher runs once (then
the cache answers); a damaged cache file is named, not trusted; the DataModule hands the scores to the loss."""

import functools
import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoTokenizer

from vtlab.backbones import Backbone
from vtlab.core.assets import asset_path
from vtlab.core.errors import ConfigError, DataError
from vtlab.data import teacher
from vtlab.data.datamodule import TripletDataModule
from vtlab.data.examples import TripletExample
from vtlab.data.teacher import teacher_scored
from vtlab.models.encoder import SpladeEncoder

EXAMPLES = [
    TripletExample(
        "is the eiffel tower in paris",
        "The Eiffel Tower is a wrought-iron lattice tower in Paris, France.",
        ["Mount Fuji is the highest mountain in Japan.", "The Colosseum is an amphitheatre in Rome."],
    ),
    TripletExample(
        "do penguins live at the north pole",
        "Penguins live almost exclusively in the Southern Hemisphere; none live in the Arctic.",
        [
            "Polar bears hunt seals on Arctic sea ice.",
            "The Eiffel Tower is a wrought-iron lattice tower in Paris, France.",
        ],
    ),
]


# a teacher factory as `_partial_: true` builds it from conf/teacher/splade-tiny.yaml: its settings key the scores
_teacher = functools.partial(
    SpladeEncoder.from_backbone, Backbone("asset:splade-tiny"), precision="fp32", query_max_length=32, doc_max_length=64
)


def _splade_by_hand(texts: list[str], max_length: int) -> np.ndarray:
    """SPLADE max pooling, log(1 + relu(logits)) over the real tokens, straight from transformers in fp32."""
    path = asset_path("splade-tiny")
    tok, mlm = AutoTokenizer.from_pretrained(path), AutoModelForMaskedLM.from_pretrained(path).eval()
    enc = tok(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        logits = mlm(**enc).logits.float()
    w = torch.log1p(torch.relu(logits)) * enc["attention_mask"].unsqueeze(-1)
    return w.max(dim=1).values.numpy()


@pytest.fixture
def scorings(empty_cache, monkeypatch) -> list[int]:
    """One entry per time the teacher itself scores (the cache empty at the start)."""
    calls: list[int] = []
    score = teacher._score
    monkeypatch.setattr(teacher, "_score", lambda *args: calls.append(1) or score(*args))
    return calls


def test_scores_are_the_teachers_dot_products_and_the_teacher_runs_once(scorings):
    scored = teacher_scored(EXAMPLES, _teacher, name="tiny-q32-d64")
    for ex, out in zip(EXAMPLES, scored):
        q = _splade_by_hand([ex.query], 32)[0]
        d = _splade_by_hand([ex.positive, *ex.negatives], 64)
        np.testing.assert_allclose(out.scores, d @ q, rtol=1e-4, atol=1e-3)
        assert (out.query, out.positive, out.negatives) == (ex.query, ex.positive, ex.negatives)
    assert scored[0].scores[0] > max(scored[0].scores[1:])  # the teacher ranks the answer first
    again = teacher_scored(EXAMPLES, _teacher, name="tiny-q32-d64")
    assert scorings == [1] and [e.scores for e in again] == [e.scores for e in scored]


def test_a_scale_multiplies_the_scores_and_the_cache_keeps_them_raw(scorings):
    raw = teacher_scored(EXAMPLES, _teacher, name="tiny-q32-d64")
    scaled = teacher_scored(EXAMPLES, _teacher, name="tiny-q32-d64", scale=30.0)
    assert scorings == [1]  # one cache entry for every scale
    for r, s in zip(raw, scaled):
        np.testing.assert_allclose(s.scores, [30.0 * v for v in r.scores], rtol=1e-12)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match=r"data\.teacher\.scale="):
            teacher_scored(EXAMPLES, _teacher, name="tiny-q32-d64", scale=bad)


def test_a_damaged_score_file_is_named(empty_cache):
    teacher_scored(EXAMPLES, _teacher, name="tiny-q32-d64")
    (path,) = (empty_cache / "teacher-scores").glob("tiny-q32-d64-*.json")
    path.write_text(json.dumps([[1.0, 2.0]]))
    with pytest.raises(DataError, match=f"{path}: 1 score lists, expected 2; delete it to recompute"):
        teacher_scored(EXAMPLES, _teacher, name="tiny-q32-d64")
    path.write_text("[[1.0")
    with pytest.raises(DataError, match=f"{path}: invalid JSON"):
        teacher_scored(EXAMPLES, _teacher, name="tiny-q32-d64")
    with pytest.raises(DataError, match="name='a/b'"):
        teacher_scored(EXAMPLES, _teacher, name="a/b")


@pytest.mark.usefixtures("empty_cache")
def test_the_datamodule_passes_teacher_scores_to_the_loss():
    dm = TripletDataModule(
        EXAMPLES,
        tokenizer=_teacher().tokenizer,
        batch_size=2,
        num_negatives=2,
        teacher=functools.partial(teacher_scored, teacher=_teacher, name="tiny-q32-d64"),
    )
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    expected = teacher_scored(EXAMPLES, _teacher, name="tiny-q32-d64")
    got = batch["teacher_scores"].tolist()
    assert sorted(map(tuple, got)) == sorted(tuple(e.scores) for e in expected)


def test_jobs_side_by_side_compute_a_teachers_scores_once(tmp_path, monkeypatch):
    # two runs starting together (a sweep's first two jobs) need the same scores: one computes, the other waits, reads
    import threading
    import time

    from vtlab.data.teacher import cached_scores

    calls = []

    def compute() -> list[list[float]]:
        calls.append(threading.get_ident())
        time.sleep(0.5)
        return [[1.0, 0.5, 0.25], [2.0, 1.0, 0.5]]

    path = tmp_path / "scores.json"
    results = []
    threads = [threading.Thread(target=lambda: results.append(cached_scores(path, EXAMPLES, compute))) for _ in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and results[0] == results[1] == [[1.0, 0.5, 0.25], [2.0, 1.0, 0.5]]
