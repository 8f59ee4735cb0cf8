"""Why the real-case table has no "e5-vt-lower" arm: e5-small moved by VT onto its own pieces without a capital letter
(vocab=e5-lowercase, init=subword: every row copied, ids renumbered, input lowercased by the tokenizer) is by
construction the model of the arm e5-lowercase-masked (vocab=lowercase-masked: e5's own vocabulary, input lowercased,
the cased output rows at weight 0 and bias -1e4). Both are built here as a run builds them, from the real offline
e5-small and before any MLM or APC step, and their SPLADE vectors of real mixed-case English texts are compared term
by term through the pieces' strings. The plain lowercased-input arm (vocab=lowercase) is built too: its cased pieces
do fire, so the comparison can tell a model whose cased rows are live from one whose rows are not."""

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from helpers import compose_config
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from vtlab.models.encoder import SpladeEncoder
from vtlab.stages.build import build_encoder

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("shared_cache")]

EXPERIMENT = "experiment=testbed/real-case/e5-lowercase-masked"
FP32 = "model.encoder.precision=fp32"  # both sides in fp32, whatever the CPU would pick
VT_LOWER = ["vocab=e5-lowercase", "init=subword"]

DOCS = [
    "The Eiffel Tower was completed in 1889 as the entrance arch to the World's Fair in Paris, France.",
    "NASA's James Webb Space Telescope, launched on December 25, 2021, orbits the Sun near the L2 point.",
    "McDonald's opened its first restaurant in Moscow in January 1990, on Pushkin Square.",
    "Apple Inc. introduced the iPhone in 2007; Steve Jobs presented it at the Macworld Conference in San Francisco.",
    "São Paulo is the most populous city in Brazil and the largest Portuguese-speaking city in the World.",
    "The United Nations (UN) was founded in 1945 after World War II to maintain International Peace and Security.",
]
QUERIES = [
    "Is the Eiffel Tower taller than the Statue of Liberty?",
    "Did NASA launch the James Webb telescope in 2021?",
    "is McDonald's in RUSSIA still open",
    "When did Apple release the first iPhone?",
]

# fp32: the two models run the same arithmetic on the same rows, but through a decoder of another shape; a weight is a
# log1p of a logit of magnitude ~10, so a few ulps of it are well under 1e-5
RTOL, ATOL = 1e-5, 1e-5


def encoder(overrides: list[str]) -> SpladeEncoder:
    """The encoder a run evaluates with before training (vtlab.stages.build.build_encoder): the backbone moved to the
    run's vocabulary (transfer or derived model, cached), no MLM, no APC. The real-case arm's config when it composes,
    else the base config with backbone=e5-small (vocab, init and the backbone define the model)."""
    try:
        cfg = compose_config([EXPERIMENT, FP32, *overrides])
    except (HydraException, OmegaConfBaseException):
        cfg = compose_config(["backbone=e5-small", "vocab=lowercase-masked", FP32, *overrides])
    enc = build_encoder(cfg)
    assert isinstance(enc, SpladeEncoder) and enc.resolved_precision() == "fp32"
    return enc.eval()


@pytest.fixture(scope="module")
def masked() -> SpladeEncoder:
    return encoder([])


@pytest.fixture(scope="module")
def vt_lower() -> SpladeEncoder:
    return encoder(VT_LOWER)


@pytest.fixture(scope="module")
def lowercase() -> SpladeEncoder:
    return encoder(["vocab=lowercase"])


def cased_pieces(tokenizer) -> set[str]:
    """Pieces holding an uppercase letter, never a special token (computed here, not by vtlab.vocab)."""
    specials = set(tokenizer.all_special_tokens)
    return {p for p in tokenizer.get_vocab() if p not in specials and any(c.isupper() for c in p)}


def pieces(enc: SpladeEncoder, texts: list[str], side: str) -> list[list[str]]:
    """Each text as the encoder tokenizes it (its own preprocess included), as piece strings, padding dropped."""
    batch = enc.tokenize(texts, side)
    return [
        enc.tokenizer.convert_ids_to_tokens(ids[mask.bool()].tolist())
        for ids, mask in zip(batch["input_ids"], batch["attention_mask"])
    ]


def by_piece(enc: SpladeEncoder, vectors: sp.csr_matrix) -> list[dict[str, float]]:
    """Each row of `vectors` as {piece string: weight} over its nonzero terms."""
    out = []
    for r in range(vectors.shape[0]):
        row = vectors.getrow(r)
        terms = enc.tokenizer.convert_ids_to_tokens(row.indices.tolist())
        assert len(set(terms)) == len(terms)  # one id per piece string: the strings identify the terms
        out.append(dict(zip(terms, row.data.tolist())))
    return out


def assert_same_vectors(a: dict[str, float], b: dict[str, float]) -> None:
    terms = sorted(a.keys() | b.keys())
    x = np.array([a.get(t, 0.0) for t in terms])
    y = np.array([b.get(t, 0.0) for t in terms])
    np.testing.assert_allclose(x, y, rtol=RTOL, atol=ATOL, err_msg=f"terms only in one: {sorted(a.keys() ^ b.keys())}")


def test_vt_lower_vocabulary_is_e5s_pieces_without_a_capital(masked, vt_lower):
    e5_vocab = masked.tokenizer.get_vocab()
    cased = cased_pieces(masked.tokenizer)
    assert len(cased) > 10_000  # e5-small enpt: 47,284 pieces
    assert set(vt_lower.tokenizer.get_vocab()) == set(e5_vocab) - cased
    assert vt_lower.vocab_size == len(e5_vocab) - len(cased) < masked.vocab_size == len(e5_vocab)


@pytest.mark.parametrize("side,texts", [("doc", DOCS), ("query", QUERIES)])
def test_both_models_tokenize_the_lowercased_texts_alike(masked, vt_lower, side, texts):
    got, expected = pieces(vt_lower, texts, side), pieces(masked, texts, side)
    assert got == expected
    # lowercased: no piece with a capital, while e5's tokenizer on the texts as they are does produce some
    assert not {p for row in got for p in row} & cased_pieces(masked.tokenizer)
    raw = masked.tokenizer(texts)["input_ids"]
    assert {p for ids in raw for p in masked.tokenizer.convert_ids_to_tokens(ids)} & cased_pieces(masked.tokenizer)


def test_every_vt_lower_row_is_the_masked_models_row_of_the_same_piece(masked, vt_lower):
    e5_ids = masked.tokenizer.get_vocab()
    vt_vocab = vt_lower.tokenizer.get_vocab()
    vt_ids = torch.tensor(list(vt_vocab.values()))
    src_ids = torch.tensor([e5_ids[p] for p in vt_vocab])
    a, b = vt_lower.model.get_output_embeddings(), masked.model.get_output_embeddings()
    torch.testing.assert_close(a.weight[vt_ids], b.weight[src_ids], rtol=0, atol=0)
    torch.testing.assert_close(a.bias[vt_ids], b.bias[src_ids], rtol=0, atol=0)


@pytest.mark.parametrize("side,texts", [("doc", DOCS), ("query", QUERIES)])
def test_vt_lower_and_masked_give_the_same_vector_term_by_term(masked, vt_lower, lowercase, side, texts):
    cased = cased_pieces(masked.tokenizer)
    m = by_piece(masked, masked.encode(texts, side, show_progress=False))
    v = by_piece(vt_lower, vt_lower.encode(texts, side, show_progress=False))
    for text, mine, theirs in zip(texts, m, v):
        assert len(mine) > 100, text  # before MLM e5's vectors are wide: the comparison has terms to compare
        assert not mine.keys() & cased, text  # the masked model gives no weight to a cased piece
        assert_same_vectors(theirs, mine)
    # what is compared can differ: with its cased rows live (plain lowercased input), e5 weighs cased pieces
    live = by_piece(lowercase, lowercase.encode(texts, side, show_progress=False))
    assert all(row.keys() & cased for row in live)
    with pytest.raises(AssertionError):
        assert_same_vectors(v[0], live[0])
