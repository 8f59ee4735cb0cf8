"""IDF tables: hand-computed values on a 4-document corpus, special tokens, lowercasing, json round trip, caching."""

import json
import math

import numpy as np
import pytest
from transformers import AutoTokenizer

from vtlab.backbones import TinyModernBert
from vtlab.core.assets import asset_path
from vtlab.core.errors import DataError
from vtlab.models import idf as idf_module
from vtlab.models.idf import IdfTable, idf_from_df

CORPUS = ["apple banana", "apple cherry apple", "banana", "grape"]

pytestmark = pytest.mark.usefixtures("fresh_cache")


@pytest.fixture(scope="module")
def bert_tok():
    return AutoTokenizer.from_pretrained(str(asset_path("minilm")))


def test_hand_built_corpus(bert_tok):
    vocab = bert_tok.get_vocab()
    for word in ("apple", "banana", "cherry", "grape", "zebra"):
        assert word in vocab  # single WordPiece tokens, so df is the number of documents containing the word
    table = IdfTable.from_corpus(bert_tok, CORPUS)
    w = {t: float(table.weights[vocab[t]]) for t in ("apple", "banana", "cherry", "grape", "zebra")}
    # N = 4; idf = ln(1 + (N - df + 0.5) / (df + 0.5)); "apple" occurs twice in doc 2 but counts once
    assert w["apple"] == pytest.approx(math.log(1 + 2.5 / 2.5), rel=1e-6)  # df 2 → ln 2
    assert w["banana"] == pytest.approx(math.log(2.0), rel=1e-6)  # df 2
    assert w["cherry"] == pytest.approx(math.log(1 + 3.5 / 1.5), rel=1e-6)  # df 1 → ln(10/3)
    assert w["grape"] == pytest.approx(math.log(10 / 3), rel=1e-6)
    assert w["zebra"] == pytest.approx(math.log(10.0), rel=1e-6)  # df 0 → ln(1 + 4.5/0.5)
    assert table.df[vocab["apple"]] == 2 and table.n_docs == 4
    report = table.report()
    specials = len(set(bert_tok.all_special_ids))
    assert report["zero_df"] == len(bert_tok) - 4 - specials  # everything but the 4 words and the specials


def test_special_tokens_weigh_zero(bert_tok):
    table = IdfTable.from_corpus(bert_tok, CORPUS + ["[CLS] [SEP] apple"])
    for t in bert_tok.all_special_tokens:
        assert table.weights[bert_tok.convert_tokens_to_ids(t)] == 0.0, t
    assert (np.delete(table.weights, bert_tok.all_special_ids) > 0).all()


def test_idf_from_df_is_monotone_and_positive():
    w = idf_from_df(np.arange(11), 10)
    assert (np.diff(w) < 0).all() and (w > 0).all()


@pytest.mark.slow
def test_lowercase_merges_cased_surface_forms():
    tok = TinyModernBert().load_tokenizer()  # OLMo's cased BPE
    docs = ["Apple pie", "apple tart", "APPLE juice"]
    lower_id = tok.convert_tokens_to_ids("apple")
    cased = IdfTable.from_corpus(tok, docs)
    lowered = IdfTable.from_corpus(tok, docs, lowercase=True)
    assert cased.df[lower_id] == 1 and lowered.df[lower_id] == 3
    assert lowered.df[tok.convert_tokens_to_ids("Apple")] == 0


def test_json_round_trip_and_errors(bert_tok, tmp_path):
    table = IdfTable.from_corpus(bert_tok, CORPUS)
    path = table.to_json(tmp_path / "idf.json")
    data = json.loads(path.read_text())
    assert data["apple"] == pytest.approx(math.log(2.0)) and "[CLS]" not in data
    again = IdfTable.from_json(path, bert_tok)
    np.testing.assert_allclose(again.weights, table.weights, rtol=1e-6)

    (tmp_path / "bad.json").write_text(json.dumps({"apple": 1.0, "Ġapple": 2.0}))
    with pytest.raises(DataError, match=r"bad\.json.*'Ġapple' is not in the model's vocabulary"):
        IdfTable.from_json(tmp_path / "bad.json", bert_tok)
    (tmp_path / "nan.json").write_text('{"apple": "x"}')
    with pytest.raises(DataError, match=r"nan\.json.*'apple' has weight 'x'"):
        IdfTable.from_json(tmp_path / "nan.json", bert_tok)
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(DataError, match="expected a JSON object"):
        IdfTable.from_json(tmp_path / "list.json", bert_tok)
    with pytest.raises(DataError, match="empty"):
        IdfTable.from_corpus(bert_tok, [])


@pytest.mark.slow
def test_table_is_cached_per_tokenizer_and_corpus(bert_tok, monkeypatch, empty_cache):
    # empty_cache: no other test's table may be cached, so each `boom` below proves a recomputation
    first = IdfTable.from_corpus(bert_tok, CORPUS)

    def boom(*args, **kwargs):
        raise AssertionError("recomputed a cached table")

    monkeypatch.setattr(idf_module, "document_frequencies", boom)
    np.testing.assert_array_equal(IdfTable.from_corpus(bert_tok, CORPUS).weights, first.weights)
    with pytest.raises(AssertionError):  # another corpus is another key
        IdfTable.from_corpus(bert_tok, CORPUS[:3])
    with pytest.raises(AssertionError):  # another tokenizer too
        IdfTable.from_corpus(TinyModernBert().load_tokenizer(), CORPUS)
