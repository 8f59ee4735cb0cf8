"""The ensemble teacher (vtlab/data/teacher_ensemble.py) and the dense teacher (vtlab/models/dense.py): min-max
normalisation, weights and ties against numbers worked out by hand; e5-small's dense embeddings against transformers'
own BertModel mean-pooled by hand; the ensemble of the real SPLADE-tiny and e5 configs equal to the hand combination of
its members' cached raw scores, each member run once; every teacher option of conf/teacher/ composes and instantiates,
and the testbed still distils from SPLADE-tiny."""

import functools
import json
from collections import Counter

import numpy as np
import pytest
import torch
from helpers import compose_config
from hydra.utils import instantiate
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

from vtlab.backbones import E5Small
from vtlab.core.assets import asset_path
from vtlab.core.errors import ConfigError
from vtlab.data import teacher
from vtlab.data.examples import TripletExample
from vtlab.data.teacher import teacher_scored
from vtlab.data.teacher_ensemble import ensemble_scored
from vtlab.models.dense import DenseEncoder
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
        ["Polar bears hunt seals on Arctic sea ice.", "The Eiffel Tower is a wrought-iron lattice tower in Paris."],
    ),
]
SMALL = ["data.query_max_length=16", "data.doc_max_length=32"]


class TableEncoder:
    """A teacher whose vectors are given: a dense numpy row per text, so its scores are known dot products."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def encode(self, texts, side="doc", batch_size=64, show_progress=True) -> np.ndarray:
        return np.array([self.table[t] for t in texts], dtype=np.float32)


def table_teacher(name: str, table: dict[str, list[float]]) -> functools.partial:
    return functools.partial(teacher_scored, teacher=functools.partial(TableEncoder, table), name=name)


# one example: query q, passages [p, n1, n2]; 1-d vectors, so a score is the product of two numbers
ONE = [TripletExample("q", "p", ["n1", "n2"])]
A = {"q": [1.0], "p": [3.0], "n1": [1.0], "n2": [2.0]}  # scores 3, 1, 2 → min-max 1, 0, 0.5
B = {"q": [2.0], "p": [0.1], "n1": [0.3], "n2": [0.5]}  # scores 0.2, 0.6, 1.0 → 0, 0.5, 1
TIED = {"q": [4.0], "p": [1.0], "n1": [1.0], "n2": [1.0]}  # scores 4, 4, 4 → 0.5 each


@pytest.mark.usefixtures("empty_cache")
def test_dense_teacher_scores_are_dot_products():
    np.testing.assert_allclose(table_teacher("a", A)(ONE)[0].scores, [3.0, 1.0, 2.0], rtol=1e-6)
    np.testing.assert_allclose(table_teacher("b", B)(ONE)[0].scores, [0.2, 0.6, 1.0], rtol=1e-6)


@pytest.mark.usefixtures("empty_cache")
def test_min_max_normalisation_weights_ties_and_scale_by_hand():
    a, b, tied = table_teacher("a", A), table_teacher("b", B), table_teacher("tied", TIED)
    equal = ensemble_scored(ONE, {"a": a, "b": b})[0].scores
    np.testing.assert_allclose(equal, [30 * 0.5, 30 * 0.25, 30 * 0.75], rtol=1e-6)  # (1+0)/2, (0+0.5)/2, (0.5+1)/2
    weighted = ensemble_scored(ONE, {"a": a, "b": b}, weights={"a": 3, "b": 1}, scale=10.0)[0].scores
    np.testing.assert_allclose(weighted, [10 * 0.75, 10 * 0.125, 10 * 0.625], rtol=1e-6)  # 3/4·A + 1/4·B
    with_ties = ensemble_scored(ONE, {"tied": tied, "b": b})[0].scores
    np.testing.assert_allclose(with_ties, [30 * 0.25, 30 * 0.5, 30 * 0.75], rtol=1e-6)  # (0.5+0)/2, (0.5+.5)/2, ...
    pair = [TripletExample("q", "p", ["n2"])]  # one negative: each teacher gives only its ranking, 1 and 0
    np.testing.assert_allclose(ensemble_scored(pair, {"a": a, "b": b})[0].scores, [30 * 0.5, 30 * 0.5], rtol=1e-6)
    with pytest.raises(ConfigError, match=r"a weight for each member \['a', 'b'\], got \['a'\]"):
        ensemble_scored(ONE, {"a": a, "b": b}, weights={"a": 1.0})
    with pytest.raises(ConfigError, match="data.teacher.members.c: expected a single teacher's config"):
        ensemble_scored(ONE, {"a": a, "c": lambda ex: ex})


@functools.cache
def _loaded(path: str, loader: type) -> tuple:
    """(tokenizer, model) of a model directory, loaded once by the test's own transformers calls."""
    return AutoTokenizer.from_pretrained(path), loader.from_pretrained(path, dtype=torch.float32).eval()


def _splade_by_hand(texts: list[str], max_length: int) -> np.ndarray:
    tok, mlm = _loaded(str(asset_path("splade-tiny")), AutoModelForMaskedLM)
    enc = tok(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        logits = mlm(**enc).logits.float()
    return (torch.log1p(torch.relu(logits)) * enc["attention_mask"].unsqueeze(-1)).max(dim=1).values.numpy()


def _e5_by_hand(texts: list[str], prefix: str, max_length: int) -> np.ndarray:
    """E5's recipe straight from transformers: prefix, BertModel's last hidden state averaged over the real tokens,
    divided by its Euclidean norm."""
    tok, body = _loaded(str(E5Small().materialize()), AutoModel)
    enc = tok([prefix + t for t in texts], padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.no_grad():
        hidden = body(**enc).last_hidden_state.numpy()
    mask = enc["attention_mask"].numpy()[..., None]
    mean = (hidden * mask).sum(axis=1) / mask.sum(axis=1)
    return mean / np.linalg.norm(mean, axis=1, keepdims=True)


@pytest.mark.slow
@pytest.mark.usefixtures("empty_cache")
def test_e5_dense_embeddings_are_e5s_recipe_with_its_prefixes():
    encoder = DenseEncoder.from_backbone(E5Small(), query_max_length=16, doc_max_length=32)
    docs = [EXAMPLES[0].positive, "Rome.", EXAMPLES[1].positive]  # unequal lengths: batches sort and pad them
    got = encoder.encode(docs, side="doc", batch_size=2, show_progress=False)
    assert got.dtype == np.float32 and got.shape == (3, 384)
    np.testing.assert_allclose(got, _e5_by_hand(docs, "passage: ", 32), atol=1e-5)
    queries = [EXAMPLES[0].query, EXAMPLES[1].query]
    q = encoder.encode(queries, side="query", show_progress=False)
    np.testing.assert_allclose(q, _e5_by_hand(queries, "query: ", 16), atol=1e-5)
    assert np.abs(q - _e5_by_hand(queries, "passage: ", 16)).max() > 1e-2  # the side's prefix is what is encoded
    assert np.abs(q - _e5_by_hand(queries, "", 16)).max() > 1e-2


@pytest.mark.cli
def test_the_ensemble_of_the_real_teachers_combines_their_cached_scores_each_run_once(empty_cache, monkeypatch):
    config = instantiate(
        compose_config(
            ["teacher=ensemble", *SMALL, "data.teacher.members.e5.teacher.backbone.variant=enpt"]
        ).data.teacher
    )
    calls = Counter()
    score = teacher._score
    monkeypatch.setattr(
        teacher, "_score", lambda encoder, *args: calls.update([type(encoder)]) or score(encoder, *args)
    )
    members = config.keywords["members"]
    assert {label: m.keywords["name"] for label, m in members.items()} == {
        "splade": "splade-tiny-q16-d32",
        "e5": "e5-small-enpt-dense-q16-d32",
    }
    scored = ensemble_scored(EXAMPLES, members, weights=config.keywords["weights"], scale=config.keywords["scale"])
    files = sorted((empty_cache / "teacher-scores").glob("*.json"))
    mtimes = [f.stat().st_mtime_ns for f in files]
    again = ensemble_scored(EXAMPLES, members, weights={"splade": 1.0, "e5": 1.0}, scale=30.0)
    alone = {label: m(EXAMPLES) for label, m in members.items()}  # what a run with one of them alone reads
    assert calls == {SpladeEncoder: 1, DenseEncoder: 1}
    assert [f.stat().st_mtime_ns for f in sorted((empty_cache / "teacher-scores").glob("*.json"))] == mtimes
    assert [e.scores for e in again] == [e.scores for e in scored] and len(files) == 3
    # other weights: another combination (its own cache file), from the members' cached scores, no teacher run again
    reweighted = ensemble_scored(EXAMPLES, members, weights={"splade": 2.0, "e5": 1.0}, scale=30.0)
    assert (
        calls == {SpladeEncoder: 1, DenseEncoder: 1} and len(list((empty_cache / "teacher-scores").glob("*.json"))) == 4
    )

    raw = {
        label: json.loads(next((empty_cache / "teacher-scores").glob(f"{m.keywords['name']}-*.json")).read_text())
        for label, m in members.items()
    }
    assert {label: [e.scores for e in alone[label]] for label in raw} == raw
    for i, ex in enumerate(EXAMPLES):  # the raw scores are the teachers' own
        passages = [ex.positive, *ex.negatives]
        np.testing.assert_allclose(
            raw["splade"][i], _splade_by_hand(passages, 32) @ _splade_by_hand([ex.query], 16)[0], rtol=1e-4, atol=1e-3
        )
        e5 = _e5_by_hand(passages, "passage: ", 32) @ _e5_by_hand([ex.query], "query: ", 16)[0]
        np.testing.assert_allclose(raw["e5"][i], e5, atol=1e-5)
        normalised = []
        for s in (raw["splade"][i], raw["e5"][i]):
            low, high = min(s), max(s)
            normalised.append([(v - low) / (high - low) for v in s])
        expected = [30 * (x + y) / 2 for x, y in zip(*normalised, strict=True)]
        np.testing.assert_allclose(scored[i].scores, expected, rtol=1e-9)
        expected = [30 * (2 * x + y) / 3 for x, y in zip(*normalised, strict=True)]
        np.testing.assert_allclose(reweighted[i].scores, expected, rtol=1e-9)
        assert scored[i].scores[0] == 30.0  # both teachers rank the answer first


@pytest.mark.parametrize("option", ["splade-tiny", "e5-dense", "ensemble"])
def test_each_teacher_option_composes_and_instantiates(option):
    cfg = compose_config([f"teacher={option}", *SMALL])
    built = instantiate(cfg.data.teacher)
    expected = {"splade-tiny": teacher_scored, "e5-dense": teacher_scored, "ensemble": ensemble_scored}[option]
    assert built.func is expected
    names = (
        [built.keywords["name"]]
        if option != "ensemble"
        else [m.keywords["name"] for m in built.keywords["members"].values()]
    )
    assert names and all(n.endswith("-q16-d32") for n in names)
    if option == "ensemble":  # its members are the single-teacher configs, whose cached scores they share
        assert names == [
            instantiate(compose_config([f"teacher={o}", *SMALL]).data.teacher).keywords["name"]
            for o in ("splade-tiny", "e5-dense")
        ]
        assert dict(built.keywords["weights"]) == {"splade": 1.0, "e5": 1.0} and built.keywords["scale"] == 30.0


def test_no_teacher_by_default_and_the_testbed_distils_from_splade_tiny(tmp_path):
    assert compose_config([f"paths.run_dir={tmp_path}"]).data.get("teacher") is None
    cfg = compose_config(
        ["experiment=testbed/main/bpe-lowercase", f"paths.run_dir={tmp_path}"], return_hydra_config=True
    )
    assert cfg.hydra.runtime.choices.teacher == "splade-tiny"
    assert cfg.data.teacher.name == "splade-tiny-q64-d128"
    assert cfg.data.teacher.teacher.backbone.name_or_path == "asset:splade-tiny"
