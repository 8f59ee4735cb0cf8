"""The scalar keys a researcher uses for their own data, each with a one-line error naming the key:
`vocab.corpus.path` (.txt / .jsonl / BEIR directory / directory of files), `data.dev_path` (a BEIR dev set, refused
when it shares questions with training), and results filed under a BEIR directory's own name."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import compose_config
from hydra.utils import instantiate

from vtlab.core.errors import DataError, VtlabError, user_error
from vtlab.data.collections import Collection
from vtlab.data.corpora import TextCorpus
from vtlab.evaluation import RetrievalEvaluation
from vtlab.vocab.targets import CorpusWordPiece


@contextlib.contextmanager
def user_error_line(pattern: str) -> Iterator[None]:
    """The error the user sees (vtlab's, unwrapped from Hydra's instantiation error as the CLI does): one line that
    matches `pattern`."""
    with pytest.raises(Exception) as err:
        yield
    shown = user_error(err.value)
    assert isinstance(shown, VtlabError), repr(err.value)
    assert re.search(pattern, str(shown)) and "\n" not in str(shown), str(shown)


TEXTS = ["Alpha beta gamma.", "Delta epsilon zeta.", "Eta theta iota."]


def _beir(root: Path, queries: dict[str, str], split: str = "test") -> Path:
    (root / "qrels").mkdir(parents=True)
    docs = {f"d{i}": f"passage about {q}" for i, q in enumerate(queries.values())}
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d, "title": "T", "text": t}) + "\n" for d, t in docs.items())
    )
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (root / "qrels" / f"{split}.tsv").write_text("".join(f"{q}\td{i}\t1\n" for i, q in enumerate(queries)))
    return root


# ---- vocab.corpus.path ------------------------------------------------------------------------------------------
def test_vocab_corpus_path_is_a_config_key_for_every_kind_of_file(tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    (files / "a.txt").write_text("\n".join(TEXTS[:2]) + "\n\n")
    (files / "b.jsonl").write_text(json.dumps({"body": TEXTS[2], "title": "Head"}) + "\n")
    beir = _beir(tmp_path / "beir", {"q0": "one", "q1": "two"})
    cases = [
        (files / "a.txt", "text", TEXTS[:2]),
        (files / "b.jsonl", "body", [f"Head {TEXTS[2]}"]),
        (beir, "text", ["T passage about one", "T passage about two"]),  # a BEIR directory: its corpus.jsonl
        (beir / "corpus.jsonl", "text", ["T passage about one", "T passage about two"]),
        (files, "body", [*TEXTS[:2], f"Head {TEXTS[2]}"]),  # a directory of files, in name order
    ]
    for path, field, want in cases:
        vocab = instantiate(
            compose_config(["vocab=corpus-wordpiece", f"vocab.corpus.path={path}", f"vocab.corpus.field={field}"]).vocab
        )
        assert isinstance(vocab, CorpusWordPiece)
        assert list(vocab.corpus()) == want, path
        assert path.name in vocab.describe() or "corpus.jsonl" in vocab.describe()  # says what it trains on


def test_the_same_texts_give_the_same_vocabulary_wherever_they_live(tmp_path):
    (tmp_path / "x").mkdir()
    for p in (tmp_path / "a.txt", tmp_path / "x" / "b.txt"):
        p.write_text("\n".join(TEXTS) + "\n")
    a, b = (
        CorpusWordPiece("corpus-wordpiece", corpus=TextCorpus(str(p))).cache_key()
        for p in (tmp_path / "a.txt", tmp_path / "x" / "b.txt")
    )
    assert a == b == CorpusWordPiece("corpus-wordpiece", corpus=list(TEXTS)).cache_key()
    (tmp_path / "a.txt").write_text("\n".join(TEXTS[:2]) + "\n")  # an edited corpus is another vocabulary
    assert CorpusWordPiece("corpus-wordpiece", corpus=TextCorpus(str(tmp_path / "a.txt"))).cache_key() != a
    default = CorpusWordPiece("corpus-wordpiece", corpus=TextCorpus())
    assert default.cache_key() == instantiate(compose_config(["vocab=corpus-wordpiece"]).vocab).cache_key()


@pytest.mark.parametrize(
    "make,expected",
    [
        (lambda d: d / "missing.txt", r"vocab\.corpus\.path='.*missing\.txt' does not exist"),
        (
            lambda d: (d / "x.csv").touch() or d / "x.csv",
            r"vocab\.corpus\.path='.*x\.csv': expected a \.txt or \.jsonl file",
        ),
        (
            lambda d: (d / "empty").mkdir() or d / "empty",
            r"vocab\.corpus\.path='.*empty': the directory has no corpus\.jsonl",
        ),
    ],
)
def test_a_bad_vocab_corpus_path_is_one_line_naming_the_key(tmp_path, make, expected):
    path = make(tmp_path)
    with user_error_line(expected):
        instantiate(compose_config(["vocab=corpus-wordpiece", f"vocab.corpus.path={path}"]).vocab)


def test_a_bad_line_in_the_vocab_corpus_names_file_line_and_key(tmp_path):
    (tmp_path / "c.jsonl").write_text(json.dumps({"text": "ok"}) + "\n" + json.dumps({"body": "x"}) + "\n")
    corpus = TextCorpus(str(tmp_path / "c.jsonl"))
    with pytest.raises(DataError, match=r"c\.jsonl:2: no string field 'text'.*vocab\.corpus\.field"):
        list(corpus())
    (tmp_path / "b.txt").write_bytes(b"fine\n\xff\xfe bad\n")
    with pytest.raises(DataError, match=r"b\.txt:2: not valid UTF-8"):
        list(TextCorpus(str(tmp_path / "b.txt"))())


# ---- data.dev_path ----------------------------------------------------------------------------------------------
def _triplets(path: Path, questions: list[str]) -> Path:
    path.write_text(
        "".join(json.dumps({"query": q, "positive": f"p {q}", "negatives": [f"n {q}"]}) + "\n" for q in questions)
    )
    return path


def test_data_dev_path_is_the_dev_set(tmp_path):
    dev = _beir(tmp_path / "mydev", {"q0": "who wrote it", "q1": "when was it"}, split="dev")
    train = _triplets(tmp_path / "t.jsonl", ["what is it", "where is it"])
    dm = instantiate(compose_config(["data=jsonl", f"data.train.path={train}", f"data.dev_path={dev}"]).data)
    dm.setup("fit")
    assert isinstance(dm.dev_collection, Collection) and dm.dev_collection.name == "mydev"
    assert dm.dev_collection.queries == {"q0": "who wrote it", "q1": "when was it"}
    assert len(dm.val_dataloader()) == 2


def test_a_bad_dev_path_is_one_line_before_anything_loads(tmp_path):
    train = _triplets(tmp_path / "t.jsonl", ["what is it"])
    with user_error_line(r"data\.dev_path='.*nope': no such directory \(expected a BEIR directory"):
        instantiate(
            compose_config(["data=jsonl", f"data.train.path={train}", f"data.dev_path={tmp_path / 'nope'}"]).data
        )
    dev = _beir(tmp_path / "d", {"q0": "x"}, split="test")  # no qrels/dev.tsv
    dm = instantiate(compose_config(["data=jsonl", f"data.train.path={train}", f"data.dev_path={dev}"]).data)
    with pytest.raises(
        DataError, match=r"qrels/dev\.tsv: missing qrels for split 'dev' \(available splits: \['test'\]\)"
    ):
        dm.setup("fit")


def test_dev_questions_that_are_training_questions_are_refused(tmp_path):
    dev = _beir(tmp_path / "d", {"q0": "What is it?", "q1": "new one"}, split="dev")
    train = _triplets(tmp_path / "t.jsonl", ["what  is it?", "other"])  # the same question up to case and spacing
    dm = instantiate(compose_config(["data=jsonl", f"data.train.path={train}", f"data.dev_path={dev}"]).data)
    with pytest.raises(
        DataError,
        match=rf"^data\.dev_path={re.escape(str(dev))} vs data\.train\.path="
        rf"{re.escape(str(train))}: 1 of 2 dev questions are training questions "
        r"\(e\.g\. 'q0' of d: ",
    ):
        dm.setup("fit")


def test_an_empty_triplet_file_is_named(tmp_path):
    (tmp_path / "t.jsonl").write_text("")
    with user_error_line(r"t\.jsonl: the triplet file is empty"):
        instantiate(compose_config(["data=jsonl", f"data.train.path={tmp_path / 't.jsonl'}"]).data)


# ---- results under the collection's name ------------------------------------------------------------------------
def test_a_beir_evaluation_is_named_after_its_directory(tmp_path):
    beir = _beir(tmp_path / "scifact-mine", {"q0": "one"})
    ev = instantiate(compose_config(["eval=beir", f"eval.path={beir}"]).eval)
    assert isinstance(ev, RetrievalEvaluation) and ev.name == "scifact-mine"
    assert instantiate(compose_config(["eval=beir", f"eval.path={beir}", "eval.name=sf"]).eval).name == "sf"


def test_the_quickstart_evaluates_on_passages_it_never_trained_on():
    """Defaults (make demo): BoolQ-clean data and evaluation; no evaluation passage is a training positive or
    negative, a dev passage, or a text of the vocabulary's corpus."""
    from vtlab.data.clean import normalize

    cfg = compose_config([])
    ev = instantiate(cfg.eval)
    evaluated = {normalize(t) for t in ev.collection.corpus.values()}
    dm = instantiate(cfg.data)
    dm.setup("fit")
    trained = {normalize(t) for ex in dm.train_examples for t in (ex.positive, *ex.negatives)}
    dev = {normalize(t) for t in dm.dev_collection.corpus.values()}
    vocab_texts = {normalize(t) for t in instantiate(cfg.vocab).corpus()}
    assert ev.name == "boolq-clean" and len(evaluated) == 2109  # 2,217 less 108 near-copies (vtlab.data.clean)
    assert not evaluated & trained and not evaluated & dev and not evaluated & vocab_texts
