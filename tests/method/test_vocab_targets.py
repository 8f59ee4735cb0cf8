"""The `vocab` config group: native + input-normalization baselines, the bert-uncased target, corpus WordPiece."""

import os
import pickle
from pathlib import Path

import pytest
from helpers import compose_config, need
from hydra.utils import instantiate

from vtlab.core.errors import AssetError, VtlabError
from vtlab.data.corpora import TextCorpus, boolq_passages
from vtlab.vocab.targets import (
    CorpusWordPiece,
    NativeVocab,
    Normalizer,
    PretrainedVocab,
    blank_prefix,
    blank_prefix_lower,
    to_lower,
)

TEXTS = ["The Café in Paris", "  already spaced", "ÉCOLE naïve", "", "x"]


def _vocab_node(option: str):
    # Compose only the vocab group: the full config also needs every other group to resolve.
    return compose_config(config_name=f"vocab/{option}").vocab


# -- normalization baselines -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "option,fn,lowercase,blank",
    [
        ("lowercase", to_lower, True, False),
        ("blank-prefix", blank_prefix, False, True),
        ("blank-prefix-lower", blank_prefix_lower, True, True),
    ],
)
def test_normalizer_baselines(option, fn, lowercase, blank):
    norm = Normalizer(lowercase=lowercase, blank_prefix=blank)
    assert [norm(t) for t in TEXTS] == [fn(t) for t in TEXTS]
    assert pickle.loads(pickle.dumps(norm)) == norm and pickle.loads(pickle.dumps(fn)) is fn
    vocab = instantiate(_vocab_node(option))
    assert isinstance(vocab, NativeVocab) and not vocab.transfers and vocab.name == option
    assert vocab.preprocess == norm and [vocab.preprocess(t) for t in TEXTS] == [fn(t) for t in TEXTS]


def test_normalizer_examples():
    assert Normalizer(lowercase=True)("The Café") == "the café"
    assert Normalizer(blank_prefix=True)("The") == " The"
    assert Normalizer(lowercase=True, blank_prefix=True)("The") == " the"


def test_native_keeps_source_tokenizer():
    vocab = instantiate(_vocab_node("native"))
    assert isinstance(vocab, NativeVocab) and vocab.preprocess is None and not vocab.transfers
    sentinel = object()
    assert vocab.load_tokenizer(sentinel) is sentinel and vocab.embedding_source() is None


def test_model_preprocess_interpolation_instantiates():
    """conf/model/splade.yaml has `preprocess: ${vocab.preprocess}`: the interpolated node must instantiate."""
    from omegaconf import OmegaConf

    for option, expected in [
        ("native", None),
        ("lowercase", Normalizer(lowercase=True)),
        ("blank-prefix-lower", Normalizer(lowercase=True, blank_prefix=True)),
    ]:
        cfg = OmegaConf.create(
            {"vocab": OmegaConf.to_container(_vocab_node(option)), "encoder": {"preprocess": "${vocab.preprocess}"}}
        )
        assert instantiate(cfg.encoder.preprocess) == expected


# -- bert-uncased ------------------------------------------------------------------------------------------------------
def test_bert_uncased_target():
    vocab = instantiate(_vocab_node("bert-uncased"))
    assert isinstance(vocab, PretrainedVocab) and vocab.transfers and vocab.preprocess is None
    assert vocab.embedding_source() == "asset:splade-tiny"
    assert "asset:minilm" in vocab.cache_key()
    tok = need(vocab.load_tokenizer, None)
    assert len(tok) == 30522 and tok.convert_ids_to_tokens(101) == "[CLS]"


def test_pretrained_missing_dir_names_key(tmp_path):
    with pytest.raises(AssetError, match="vocab.tokenizer"):
        PretrainedVocab("x", tokenizer=str(tmp_path / "nope" / "dir")).load_tokenizer(None)


# -- corpus WordPiece --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def wordpiece(fresh_cache):  # fresh: the WordPiece is trained here, not read from another module's cache
    need(boolq_passages)
    vocab = CorpusWordPiece("corpus-wordpiece", vocab_size=2000, corpus=TextCorpus())
    return vocab, vocab.load_tokenizer(None)


def test_boolq_passages_distinct():
    passages = need(boolq_passages)
    assert len(passages) == len(set(passages)) > 10_000


def test_wordpiece_layout(wordpiece):
    vocab, tok = wordpiece
    assert vocab.transfers and vocab.embedding_source() is None and "semantic init" in vocab.describe()
    assert len(tok) == 2000
    assert tok.convert_ids_to_tokens([0, 1, 2, 3, 4]) == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    ids = (tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id)
    assert ids == (0, 1, 2, 3, 4)
    assert sum(t.startswith("##") for t in tok.get_vocab()) > 200
    assert tok.backend_tokenizer.normalizer.normalize_str("Café NAÏVE") == "cafe naive"
    assert "".join(tok.tokenize("Café")).replace("##", "") == "cafe"
    ids = tok("the river")["input_ids"]
    assert ids[0] == 2 and ids[-1] == 3
    from vtlab.vocab.canonical import tokenizer_kind

    assert tokenizer_kind(tok) == "wordpiece"


def test_wordpiece_cache_reused(wordpiece, monkeypatch):
    vocab, _ = wordpiece
    path = vocab.cache_path()
    assert Path(os.environ["VTLAB_CACHE"]) in path.parents
    mtime = (path / "tokenizer.json").stat().st_mtime_ns

    def no_training(self):
        raise AssertionError("retrained although the tokenizer is cached")

    monkeypatch.setattr(CorpusWordPiece, "_train", no_training)
    again = CorpusWordPiece("corpus-wordpiece", vocab_size=2000, corpus=TextCorpus())
    assert again.cache_key() == vocab.cache_key() and len(again.load_tokenizer(None)) == 2000
    assert (path / "tokenizer.json").stat().st_mtime_ns == mtime
    assert CorpusWordPiece("corpus-wordpiece", vocab_size=3000, corpus=TextCorpus()).cache_key() != vocab.cache_key()


def test_wordpiece_custom_corpus_cache_key():
    a = CorpusWordPiece("c", vocab_size=1000, corpus=["one text", "two"])
    b = CorpusWordPiece("c", vocab_size=1000, corpus=iter(["one text", "two"]))
    c = CorpusWordPiece("c", vocab_size=1000, corpus=["other"])
    assert a.cache_key() == b.cache_key() != c.cache_key()


@pytest.mark.parametrize("size", [999, 200_001, 0, "20000"])
def test_wordpiece_bad_size_names_key(size):
    with pytest.raises(VtlabError, match=r"vocab\.vocab_size"):
        CorpusWordPiece("corpus-wordpiece", vocab_size=size)
    with pytest.raises(ValueError, match=r"vocab\.vocab_size"):
        CorpusWordPiece("corpus-wordpiece", vocab_size=size)


def test_wordpiece_yaml_sweepable():
    node = compose_config(["vocab.vocab_size=10000"], config_name="vocab/corpus-wordpiece").vocab
    vocab = instantiate(node)
    assert isinstance(vocab, CorpusWordPiece) and vocab.vocab_size == 10000 and vocab.name == "corpus-wordpiece"
    assert "BoolQ clean training passages" in vocab.describe()
    assert instantiate(_vocab_node("corpus-wordpiece")).vocab_size == 20000


def test_yaml_corpus_equals_default():
    """The YAML's TextCorpus (path: null) and the default corpus object share one cache entry; no corpus is refused."""
    from_yaml = instantiate(_vocab_node("corpus-wordpiece"))
    assert (
        from_yaml.cache_key() == CorpusWordPiece("corpus-wordpiece", vocab_size=20000, corpus=TextCorpus()).cache_key()
    )
    with pytest.raises(VtlabError, match=r"^vocab.corpus is null: expected the texts"):
        CorpusWordPiece("corpus-wordpiece")
