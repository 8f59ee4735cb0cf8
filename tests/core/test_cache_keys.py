"""Cache keys stream: `stable_hash` of byte chunks is the sha1 of their concatenation (hashlib's own digest is the
reference), so corpus-sized keys (IDF, a corpus WordPiece's text corpus) need no corpus-sized buffer and keep the
values they had when they hashed one joined buffer."""

import hashlib

from vtlab.core.atomic import json_hash, stable_hash
from vtlab.vocab.targets import _corpus_id

TEXTS = ["Apple é 😀", "", "a\0b", "plain"] * 50


def test_chunks_hash_as_their_concatenation():
    chunks = [t.encode("utf-8") + b"\0" for t in TEXTS]
    joined = b"".join(chunks)
    assert stable_hash(iter(chunks), length=40) == hashlib.sha1(joined).hexdigest()
    assert stable_hash(joined) == hashlib.sha1(joined).hexdigest()[:16]
    assert stable_hash("é") == hashlib.sha1("é".encode()).hexdigest()[:16]
    assert stable_hash(iter([])) == hashlib.sha1(b"").hexdigest()[:16]
    assert json_hash({"b": 1, "a": [2]}) == hashlib.sha1(b'{"a": [2], "b": 1}').hexdigest()[:16]


def test_a_text_corpus_id_is_the_sha1_of_its_nul_terminated_texts():
    expected = hashlib.sha1(b"".join(t.encode("utf-8") + b"\0" for t in TEXTS)).hexdigest()
    assert _corpus_id(TEXTS) == _corpus_id(iter(TEXTS)) == f"texts:{expected}"
    assert _corpus_id(TEXTS[:-1]) != _corpus_id(TEXTS)


def test_vocabulary_cache_keys_are_pinned(monkeypatch):
    """Each vocabulary's cache key names its class by a fixed CACHE_ID (the default corpus too, TextCorpus's CACHE_ID:
    a fixed name, its dev split and the rule that leaves the split out), never by a module path: moving the default
    corpus's function keeps every key, and the keys equal the ones the caches were built under (tokenizers' version,
    part of a trained WordPiece's key, pinned to the one they used)."""
    import tokenizers

    from vtlab.data import clean
    from vtlab.data.corpora import TextCorpus
    from vtlab.vocab.masked_outputs import CasedOutputsMasked
    from vtlab.vocab.targets import CorpusWordPiece, NativeVocab, PretrainedVocab

    monkeypatch.setattr(tokenizers, "__version__", "0.23.3")
    monkeypatch.setattr(clean.training_passages, "__module__", "vtlab.data.elsewhere")  # as if it moved
    assert _corpus_id(TextCorpus()) == TextCorpus().CACHE_ID == "vtlab.data.clean.training_passages:dev300-s0-devnd1"
    assert _corpus_id(TextCorpus(dev_seed=1)) == "vtlab.data.clean.training_passages:dev300-s1-devnd1"
    assert CorpusWordPiece("corpus-wordpiece", corpus=TextCorpus()).cache_key() == "corpus-wordpiece-0744ba4658c6"
    assert NativeVocab("native").cache_key() == "native:native"
    assert (
        PretrainedVocab("bert-uncased", "bert-base-uncased", "bert-base-uncased").cache_key()
        == "pretrained:bert-uncased:tokenizer=bert-base-uncased:embeddings=bert-base-uncased"
    )
    masked = CasedOutputsMasked("lowercase-masked")
    assert masked.cache_key() == "cased-outputs-masked:lowercase-masked:recipe=v1:bias=-10000"
