"""Cache keys stream: `stable_hash` of byte chunks is the sha1 of their concatenation (hashlib's own digest is the
reference), so corpus-sized keys (IDF, a corpus WordPiece's text corpus) need no corpus-sized buffer and keep the
values they had when they hashed one joined buffer."""
import hashlib

from vtlab.atomic import json_hash, stable_hash
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
