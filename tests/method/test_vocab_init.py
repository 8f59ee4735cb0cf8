"""Embedding initializers for Vocabulary Transfer, checked against hand computations and direct numpy formulas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import need

from vtlab.core.errors import VtlabError
from vtlab.vocab.canonical import Overlap
from vtlab.vocab.init import AllRandom, Mean, NewRandom, Semantic, Subword
from vtlab.vocab.similarity import Similarities, pmi_transform, sparsemax, zscore_transform

CONF = Path(__file__).resolve().parents[2] / "conf"


def make_overlap(target_ids, source_ids, source_size: int, target_size: int) -> Overlap:
    t, s = np.asarray(target_ids, dtype=np.int64), np.asarray(source_ids, dtype=np.int64)
    return Overlap(
        target_ids=t,
        source_ids=s,
        n_exact=len(t),
        n_fuzzy=0,
        n_special=0,
        source_size=source_size,
        target_size=target_size,
    )


def npsparsemax(z: np.ndarray) -> np.ndarray:
    """Martins & Astudillo (2016), Alg. 1, row by row in float64."""
    out = np.zeros_like(z, dtype=np.float64)
    for i, row in enumerate(z.astype(np.float64)):
        srt = np.sort(row)[::-1]
        cs = np.cumsum(srt)
        k = np.arange(1, len(row) + 1)
        kk = k[1 + k * srt > cs].max()
        out[i] = np.maximum(row - (cs[kk - 1] - 1) / kk, 0.0)
    return out


def np_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return a @ b.T


def np_ppmi(s: np.ndarray) -> np.ndarray:
    x = (s - s.min()) / (s.max() - s.min())
    p = x / x.sum()
    pi, pj = p.sum(axis=1, keepdims=True), p.sum(axis=0, keepdims=True)
    with np.errstate(divide="ignore"):
        return np.maximum(np.log(p / (pi * pj)), 0.0)  # log 0 = -inf → 0


def np_zscore(s: np.ndarray) -> np.ndarray:
    z = (s - s.mean(axis=0)) / (s.std(axis=0) + 1e-6)
    return z / z.max(axis=1, keepdims=True)


# -- sparsemax -----------------------------------------------------------------------------------------------------
def testsparsemax_hand_examples():
    # [2, 1, -1]: sorted z = 2, 1, -1; support test 1 + k·z_(k) > Σ_{j≤k} z_(j): k=1: 3 > 2 ✓; k=2: 3 > 3 ✗.
    #   So k = 1, τ = (2 − 1)/1 = 1 → max(z − 1, 0) = [1, 0, 0].
    # [1, 0.9, 0]: k=1: 2 > 1 ✓; k=2: 2.8 > 1.9 ✓; k=3: 1 > 1.9 ✗. τ = (1.9 − 1)/2 = 0.45 → [0.55, 0.45, 0].
    w = sparsemax(torch.tensor([[2.0, 1.0, -1.0], [1.0, 0.9, 0.0]]))
    torch.testing.assert_close(w, torch.tensor([[1.0, 0.0, 0.0], [0.55, 0.45, 0.0]]))


def testsparsemax_realistic_rows_are_sparse_distributions():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 16, generator=g), torch.randn(3000, 16, generator=g)
    s = torch.nn.functional.normalize(a, dim=1) @ torch.nn.functional.normalize(b, dim=1).T
    w = sparsemax(s)  # 3000 columns: the partial-sort path, with doubling for wide supports
    assert (w >= 0).all()
    torch.testing.assert_close(w.sum(dim=1), torch.ones(64))
    assert (w == 0).float().mean() > 0.9  # many exact zeros
    np.testing.assert_allclose(w.numpy(), npsparsemax(s.numpy()), atol=1e-5)
    wide = sparsemax(s * 0.01)  # flat scores: supports far beyond the initial partial sort
    assert (wide > 0).sum(dim=1).min() > 256
    np.testing.assert_allclose(wide.numpy(), npsparsemax((s * 0.01).numpy()), atol=1e-6)


# -- semantic ------------------------------------------------------------------------------------------------------
# Target vocabulary of 7: ids 0, 1, 2 overlap (2-d target embeddings), 3 … 6 new. Source: 4 rows of 3-d.
T = torch.tensor(
    [
        [1.0, 0.0],
        [0.0, 1.0],
        [-1.0, 0.0],  # overlap
        [2.0, 0.0],
        [0.5, 0.25],
        [1.0, 1.0],
        [0.0, 0.0],
    ]
)  # new
E_SRC = torch.tensor([[1.0, 2.0, 0.0], [9.0, 9.0, 9.0], [0.0, 0.0, 3.0], [4.0, 0.0, 0.0]])
HAND = make_overlap([0, 1, 2], [2, 0, 3], source_size=4, target_size=7)  # target 0 ← src 2, 1 ← 0, 2 ← 3


def run(init, emb=E_SRC, overlap=HAND, target=T, size=7, **kw):
    return init(
        emb, overlap, target_size=size, source_tokenizer=None, target_tokenizer=None, target_embeddings=target, **kw
    )


def test_semantic_cosine_by_hand():
    out, stats = run(Semantic())
    e = {t: E_SRC[s] for t, s in [(0, 2), (1, 0), (2, 3)]}
    for t in (0, 1, 2):
        assert torch.equal(out[t], e[t])  # copied exactly
    # id 3 = (2, 0): cos = [1, 0, −1] → sparsemax: k=1: 2 > 1 ✓; k=2: 1 > 1 ✗ → τ = 0 → w = [1, 0, 0].
    torch.testing.assert_close(out[3], e[0])
    # id 4 = (0.5, 0.25): cos = [2/√5, 1/√5, −2/√5] = [0.8944, 0.4472, −0.8944]; k=2: 1 + 0.8944 > 1.3416 ✓,
    #   k=3 ✗ → τ = (1.3416 − 1)/2 = 0.1708 → w = [0.7236, 0.2764, 0].
    w0 = (2 / 5**0.5 + 1 / 5**0.5 - 1) / 2
    torch.testing.assert_close(out[4], (2 / 5**0.5 - w0) * e[0] + (1 / 5**0.5 - w0) * e[1])
    # id 5 = (1, 1): cos = [0.7071, 0.7071, −0.7071] → τ = (1.4142 − 1)/2 → w = [0.5, 0.5, 0].
    torch.testing.assert_close(out[5], 0.5 * e[0] + 0.5 * e[1])
    # id 6 = (0, 0): cosine undefined → the overlap mean.
    torch.testing.assert_close(out[6], (e[0] + e[1] + e[2]) / 3)
    assert (stats["copied"], stats["semantic"], stats["mean_fallback"]) == (3, 3, 1)


def test_semantic_matmul_by_hand():
    out, _ = run(Semantic(use_matmul=True))
    # id 4 · overlap = [0.5, 0.25, −0.5]: k=2: 1.5 > 0.75 ✓; k=3: −0.5 > 0.25 ✗ → τ = −0.125 → w = [0.625, 0.375, 0].
    torch.testing.assert_close(out[4], 0.625 * E_SRC[2] + 0.375 * E_SRC[0])


def test_semantic_rescale_norm():
    out, _ = run(Semantic(rescale_norm=True))
    n = {t: float(E_SRC[s].norm()) for t, s in [(0, 2), (1, 0), (2, 3)]}
    w0 = (2 / 5**0.5 + 1 / 5**0.5 - 1) / 2
    expected = (2 / 5**0.5 - w0) * n[0] + (1 / 5**0.5 - w0) * n[1]
    assert float(out[4].norm()) == pytest.approx(expected, rel=1e-5)
    assert float(out[5].norm()) == pytest.approx(0.5 * n[0] + 0.5 * n[1], rel=1e-5)
    plain, _ = run(Semantic())
    # Same direction, only the length changes.
    torch.testing.assert_close(out[5] / out[5].norm(), plain[5] / plain[5].norm())


def random_case(n_new=37, n_ov=23, h_t=5, h=6, seed=0):
    rng = np.random.default_rng(seed)
    size = n_new + n_ov
    tgt_ids = np.sort(rng.choice(size, n_ov, replace=False))
    src_ids = rng.choice(50, n_ov, replace=False)
    T = rng.normal(size=(size, h_t)).astype(np.float32)
    E = rng.normal(size=(50, h)).astype(np.float32)
    new = np.setdiff1d(np.arange(size), tgt_ids)
    return torch.from_numpy(E), make_overlap(tgt_ids, src_ids, 50, size), torch.from_numpy(T), size, new


@pytest.mark.parametrize("similarity,transform", [("cosine", lambda s: s), ("pmi", np_ppmi), ("zscore", np_zscore)])
def test_semantic_matches_direct_numpy(similarity, transform):
    E, ov, T, size, new = random_case()
    out, stats = Semantic(similarity, chunk_rows=4)(
        E, ov, target_size=size, source_tokenizer=None, target_tokenizer=None, target_embeddings=T
    )
    s = np_cosine(T.numpy()[new].astype(np.float64), T.numpy()[ov.target_ids].astype(np.float64))
    w = npsparsemax(transform(s))
    np.testing.assert_allclose(out.numpy()[new], w @ E.numpy()[ov.source_ids], atol=1e-4)
    assert stats["semantic"] == len(new) and stats["mean_fallback"] == 0
    assert stats["support_mean"] < len(ov.target_ids)  # sparse weights


@pytest.mark.parametrize("make,reference", [(pmi_transform, np_ppmi), (zscore_transform, np_zscore)])
def test_two_pass_scores_equal_whole_matrix_formula(make, reference):
    # The score matrices themselves (sparsemax hides e.g. the PPMI clamp whenever its threshold is positive).
    g = torch.Generator().manual_seed(2)
    a = torch.nn.functional.normalize(torch.randn(41, 6, generator=g), dim=1)
    b = torch.nn.functional.normalize(torch.randn(29, 6, generator=g), dim=1)
    sims = Similarities(a, b, 5, passes=2 if make is pmi_transform else 1)
    transform = make(sims)
    got = torch.cat([transform(lo, s) for lo, s in sims]).numpy()
    want = reference(a.double().numpy() @ b.double().numpy().T)
    np.testing.assert_allclose(got, want, atol=2e-5)
    if make is pmi_transform:
        assert (got == 0).mean() > 0.2 and got.min() == 0.0  # PPMI: negative PMI clamped


@pytest.mark.parametrize("keep_bytes", [0, 2**30])
def test_pmi_from_kept_or_recomputed_similarities_is_the_same(keep_bytes, monkeypatch):
    """pmi's second pass reads the first pass's chunks when S fits the budget, else recomputes them: same scores."""
    monkeypatch.setattr(Similarities, "KEEP_BYTES", keep_bytes)
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(23, 8, generator=g), torch.randn(17, 8, generator=g)
    sims = Similarities(a, b, 4, passes=2)
    transform = pmi_transform(sims)
    assert (sims._kept is not None) == (keep_bytes > 0)
    got = torch.cat([transform(lo, s) for lo, s in sims]).numpy()
    np.testing.assert_allclose(got, np_ppmi(a.double().numpy() @ b.double().numpy().T), atol=2e-5)
    assert sims._kept is None  # released after the last pass


@pytest.mark.parametrize("similarity", ["cosine", "pmi", "zscore"])
@pytest.mark.parametrize("rescale", [False, True])
def test_semantic_chunking_does_not_change_result(similarity, rescale):
    E, ov, T, size, _ = random_case(n_new=50, n_ov=40, seed=1)
    outs = [
        Semantic(similarity, rescale_norm=rescale, chunk_rows=c)(
            E, ov, target_size=size, source_tokenizer=None, target_tokenizer=None, target_embeddings=T
        )[0]
        for c in (1, 7, 10_000)
    ]
    # Equal up to float32 rounding: BLAS sums in a different order for different block shapes.
    torch.testing.assert_close(outs[0], outs[2], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outs[1], outs[2], rtol=1e-5, atol=1e-5)


def test_semantic_pmi_constant_matrix_falls_back_to_uniform():
    # Every target row identical: all similarities equal → PPMI is all zeros → uniform weights = the overlap mean.
    E, ov, _, size, new = random_case(n_new=5, n_ov=4)
    out, _ = Semantic("pmi")(
        E, ov, target_size=size, source_tokenizer=None, target_tokenizer=None, target_embeddings=torch.ones(size, 3)
    )
    mean = E[torch.from_numpy(ov.source_ids)].mean(dim=0)
    torch.testing.assert_close(out[torch.from_numpy(new)], mean.expand(len(new), -1))


def test_semantic_without_target_embeddings_is_a_clear_error():
    with pytest.raises(VtlabError) as err:
        run(Semantic(), target=None)
    assert str(err.value) == (
        "init=semantic needs a target model with input embeddings (vocab.embedding_model); "
        "this vocabulary has none — use init=subword or init=mean"
    )
    assert Semantic.needs_target_embeddings and not Subword.needs_target_embeddings


def test_semantic_similarity_override_names_the_run():
    assert Semantic().name == "semantic" and Semantic("pmi").name == "semantic-pmi"
    with pytest.raises(VtlabError):
        Semantic("euclid")


# -- mean / random ---------------------------------------------------------------------------------------------------
def big_case():
    g = torch.Generator().manual_seed(3)
    E = torch.randn(500, 64, generator=g)
    rng = np.random.default_rng(3)
    ov = make_overlap(np.sort(rng.choice(800, 300, replace=False)), rng.choice(500, 300, replace=False), 500, 800)
    return E, ov


def call(init, E, ov, seed=0, **kw):
    return init(
        E,
        ov,
        target_size=800,
        source_tokenizer=None,
        target_tokenizer=None,
        generator=torch.Generator().manual_seed(seed),
        **kw,
    )


@pytest.mark.parametrize("init", [Mean(), NewRandom()], ids=["mean", "new-random"])
def test_overlap_rows_copied_exactly(init):
    E, ov = big_case()
    out, stats = call(init, E, ov)
    assert out.shape == (800, 64) and out.dtype == torch.float32
    assert torch.equal(out[torch.from_numpy(ov.target_ids)], E[torch.from_numpy(ov.source_ids)])
    assert stats["copied"] == 300


def test_mean_rows():
    E, ov = big_case()
    out, stats = call(Mean(), E, ov)
    new = torch.from_numpy(ov.new_target_ids)
    mean = E[torch.from_numpy(ov.source_ids)].mean(dim=0)
    torch.testing.assert_close(out[new], mean.expand(len(new), -1))
    assert stats["mean"] == 500


def test_new_random_std_and_determinism():
    E, ov = big_case()
    out, stats = call(NewRandom(), E, ov, initializer_range=0.05)
    new = out[torch.from_numpy(ov.new_target_ids)]
    assert float(new.std()) == pytest.approx(0.05, rel=0.03) and abs(float(new.mean())) < 0.002
    assert stats["random"] == 500
    assert torch.equal(out, call(NewRandom(), E, ov, initializer_range=0.05)[0])
    assert not torch.equal(out, call(NewRandom(), E, ov, seed=1, initializer_range=0.05)[0])


def test_all_random_copies_nothing():
    E, ov = big_case()
    out, stats = call(AllRandom(), E, ov)
    assert float(out.std()) == pytest.approx(0.02, rel=0.03)
    assert not torch.isclose(out[torch.from_numpy(ov.target_ids)], E[torch.from_numpy(ov.source_ids)]).any()
    assert stats["random"] == 800 and stats["copied"] == 0
    assert torch.equal(out, call(AllRandom(), E, ov)[0])


# -- subword (FVT) with real tokenizers --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bert_and_olmo():
    from transformers import AutoTokenizer

    from vtlab.backbones import TinyModernBert
    from vtlab.core.assets import asset_path

    bert = AutoTokenizer.from_pretrained(str(need(asset_path, "minilm")))
    olmo = need(TinyModernBert().load_tokenizer)
    return bert, olmo


def piece_mean(E: torch.Tensor, tok, text: str) -> tuple[torch.Tensor, list[str]]:
    ids = tok.encode(text, add_special_tokens=False)
    return E[ids].mean(dim=0), tok.convert_ids_to_tokens(ids)


def test_subword_wordpiece_target_bytelevel_source(bert_and_olmo):
    bert, olmo = bert_and_olmo
    E = torch.randn(len(olmo), 8, generator=torch.Generator().manual_seed(0))
    v = bert.get_vocab()
    # Overlap: [CLS], [SEP] and "the" (← "Ġthe"); everything else is new, [MASK]/[PAD]/[UNK] included.
    ov = make_overlap(
        [v["the"], v["[CLS]"], v["[SEP]"]],
        [olmo.convert_tokens_to_ids("Ġthe"), olmo.cls_token_id, olmo.sep_token_id],
        len(olmo),
        len(bert),
    )
    out, stats = Subword()(E, ov, target_size=len(bert), source_tokenizer=olmo, target_tokenizer=bert)

    # "##ization" continues a word: the source pieces of "ization" with no leading space.
    expected, pieces = piece_mean(E, olmo, "ization")
    assert not any(p.startswith("Ġ") for p in pieces)
    torch.testing.assert_close(out[v["##ization"]], expected)
    # "unbelievable" starts a word: the byte-level source needs " unbelievable" to give its Ġ piece(s).
    expected, pieces = piece_mean(E, olmo, " unbelievable")
    assert pieces[0].startswith("Ġ")
    torch.testing.assert_close(out[v["unbelievable"]], expected)
    # Special tokens are not tokenized as text: [MASK] gets the overlap mean.
    mean = E[torch.from_numpy(ov.source_ids)].mean(dim=0)
    torch.testing.assert_close(out[v["[MASK]"]], mean)
    assert stats["copied"] == 3 and stats["special"] == 3  # [MASK], [PAD], [UNK]
    assert stats["subword"] + stats["mean_fallback"] == len(bert) - 3
    assert stats["mean_fallback"] >= 3


def test_subword_bytelevel_target_wordpiece_source(bert_and_olmo):
    bert, olmo = bert_and_olmo
    E = torch.randn(len(bert), 8, generator=torch.Generator().manual_seed(1))
    ov = make_overlap([olmo.cls_token_id], [bert.cls_token_id], len(bert), len(olmo))
    out, _ = Subword()(E, ov, target_size=len(olmo), source_tokenizer=bert, target_tokenizer=olmo)
    o = olmo.get_vocab()
    # Byte-level "Ġunbelievable" → text "unbelievable" (a WordPiece source splits on whitespace itself).
    torch.testing.assert_close(out[o["Ġunbelievable"]], piece_mean(E, bert, "unbelievable")[0])
    # A continuation "ization" → WordPiece pieces of "ization"; "Ã©" is the UTF-8 of "é".
    torch.testing.assert_close(out[o["ization"]], piece_mean(E, bert, "ization")[0])
    torch.testing.assert_close(out[o["Ã©"]], piece_mean(E, bert, "é")[0])


# -- configs -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "group,cls,name,similarity",
    [
        ("semantic", Semantic, "semantic", "cosine"),
        ("semantic-pmi", Semantic, "semantic-pmi", "pmi"),
        ("semantic-zscore", Semantic, "semantic-zscore", "zscore"),
        ("mean", Mean, "mean", None),
        ("subword", Subword, "subword", None),
        ("new-random", NewRandom, "new-random", None),
        ("all-random", AllRandom, "all-random", None),
    ],
)
def test_init_configs_instantiate(group, cls, name, similarity):
    from helpers import compose_config
    from hydra.utils import instantiate

    cfg = compose_config(config_name=group, config_dir=CONF / "init")  # the group file alone, as its own config
    assert "_target_" in cfg and cfg.name == name
    init = instantiate(cfg)
    assert type(init) is cls and init.name == name
    if similarity:
        assert init.similarity == similarity and init.rescale_norm is False


def test_similarity_override_from_the_command_line():
    from helpers import compose_config
    from hydra.utils import instantiate

    cfg = compose_config(["init=semantic", "init.similarity=pmi"])
    init = instantiate(cfg.init)
    assert isinstance(init, Semantic) and init.similarity == "pmi" and init.name == "semantic-pmi"


@pytest.mark.parametrize("init", [Mean(), NewRandom(), AllRandom(), Semantic(), Semantic(similarity="pmi")])
def test_an_init_draws_from_the_seed_exactly_when_it_says_so_and_only_then_is_the_seed_in_its_cache_key(init):
    """`Initializer.draws` is what the transferred model's cache key trusts: a deterministic init must give the same
    rows at every transfer seed (so every run seed shares one transfer and one MLM adaptation), a drawing one not."""
    from vtlab.backbones import TinyBert
    from vtlab.vocab import PretrainedVocab
    from vtlab.vocab.transfer import TransferOptions, _cache_key

    E, ov = big_case()
    kw = {"target_embeddings": torch.randn(800, 16, generator=torch.Generator().manual_seed(5))}
    kw = kw if isinstance(init, Semantic) else {}
    rows = [call(init, E, ov, seed=s, **kw)[0] for s in (0, 1)]
    assert torch.equal(rows[0], rows[1]) is (not init.draws)
    keys = {_cache_key(TinyBert(), PretrainedVocab("v", tokenizer="t"), init, TransferOptions(seed=s)) for s in (0, 1)}
    assert len(keys) == (2 if init.draws else 1)
