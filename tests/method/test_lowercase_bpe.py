"""U, the OLMo BPE restricted to its lowercase tokens (vtlab/vocab/lowercase.py): it segments like the
blank-prefix-lower arm on the cased BPE, holds no case variant, and VT onto it copies rows; plus the gates that use it
(M_unc in the case gate, the undamaged-control gate). Real tokenizers and models throughout."""

import unicodedata

import pytest
import torch
from helpers import compose_config

from vtlab.backbones import TinyModernBert
from vtlab.data.clean import clean_train_passages
from vtlab.diagnose.case import case_groups, case_handling
from vtlab.reproduce import gates
from vtlab.vocab.canonical import special_ids
from vtlab.vocab.init import Subword
from vtlab.vocab.lowercase import LowercaseVocab, has_uppercase, token_text
from vtlab.vocab.transfer import TransferOptions, apply_transfer

U_SIZE = 37_340  # of the 50,368 ids of ModernBERT's tokenizer (13,028 dropped); measured, pinned by the recipe

CRAFTED = [
    "İstanbul, ÉCOLE, café, naïve, Ångström, straße, STRASSE",
    "ΟΔΟΣ ΣΑΣ Σ ΑΣ'Α ὈΔΥΣΣΕΎΣ",  # Greek capital sigma: word-final "ς" as str.lower() writes it
    "Prices rose 12.5% in 2024 (Q3: 1,234,567 units) — 3×4=12",
    "emoji 🎉👍🏽 and flags 🇫🇷, CJK 東京 and Hangul 한국어",
    "  two leading spaces",
    " one leading space",
    "THE ALL-CAPS WORD NASA and McDonald's iPhone",
    "tabs\tand\nnewlines\r\n and  double  spaces and a long run" + " " * 30 + "end",
    "Ǆemal ǅ ǆ, 273 \u212a and 5 \u2126",  # title-case digraphs; the Kelvin and Ohm signs (NFC: K, Ω)
]


@pytest.fixture(scope="module")
def vocab(shared_cache):
    return LowercaseVocab("olmo-lowercase", TinyModernBert(), blank_prefix=True)


@pytest.fixture(scope="module")
def u(vocab):
    return vocab.load_tokenizer()


@pytest.fixture(scope="module")
def olmo(vocab):
    return vocab.source_tokenizer()


def test_u_keeps_only_lowercase_tokens_and_every_special(u, olmo, vocab):
    specials = special_ids(u)
    texts = {i: token_text(t) for t, i in u.get_vocab().items() if i not in specials}
    assert not [t for t in texts.values() if has_uppercase(t)]
    assert len(u) == U_SIZE < len(olmo) == 50_368
    assert vocab.stats()["dropped"] == len(olmo) - U_SIZE == 13_028
    vocab_u = u.get_vocab()
    assert "Ġthe" in vocab_u and "ĠThe" not in vocab_u and "THE" not in vocab_u
    assert not any(chr(c) in vocab_u for c in range(ord("A"), ord("Z") + 1))  # the single-byte capitals go
    assert all(chr(c) in vocab_u for c in range(ord("a"), ord("z") + 1))
    assert "Ã" in vocab_u  # byte 0xC3 alone (first byte of "é" and of "É") is no character: kept
    assert {olmo.convert_ids_to_tokens(i) for i in special_ids(olmo)} == {u.convert_ids_to_tokens(i) for i in specials}
    assert u.special_tokens_map == olmo.special_tokens_map
    ids = u("Hello")["input_ids"]
    assert (ids[0], ids[-1]) == (u.cls_token_id, u.sep_token_id)
    assert u.convert_ids_to_tokens([ids[0], ids[-1], u.mask_token_id, u.pad_token_id]) == [
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "[PAD]",
    ]
    # ids keep the source's order
    order = olmo.convert_tokens_to_ids(u.convert_ids_to_tokens(list(range(len(u)))))
    assert order == sorted(order)


def test_u_segments_exactly_like_blank_prefix_lower_on_the_cased_bpe(u, olmo):
    texts = list(clean_train_passages()[:500]) + CRAFTED
    ours = u(texts, add_special_tokens=False)["input_ids"]
    theirs = olmo([" " + t.lower() for t in texts], add_special_tokens=False)["input_ids"]
    for text, a, b in zip(texts, ours, theirs):
        assert u.convert_ids_to_tokens(a) == olmo.convert_ids_to_tokens(b), text[:80]
        assert u.unk_token_id not in a
    for text, a in zip(CRAFTED, ours[-len(CRAFTED) :]):  # nothing lost: the tokens spell the normalized text
        assert u.decode(a, clean_up_tokenization_spaces=False) == unicodedata.normalize("NFC", " " + text.lower())


def test_cache_key_is_stable_and_the_cached_tokenizer_reloads_identically(vocab, u, monkeypatch):
    again = LowercaseVocab("olmo-lowercase", TinyModernBert(), blank_prefix=True)
    assert again.cache_key() == vocab.cache_key() and again.cache_path() == vocab.cache_path()
    assert LowercaseVocab("other", TinyModernBert(hidden_size=64), blank_prefix=True).cache_key() != vocab.cache_key()
    monkeypatch.setattr(LowercaseVocab, "_build", lambda self: pytest.fail("rebuilt a cached vocabulary"))
    reloaded = again.load_tokenizer()
    assert reloaded.backend_tokenizer.to_str() == u.backend_tokenizer.to_str()
    assert reloaded.get_vocab() == u.get_vocab() and reloaded.special_tokens_map == u.special_tokens_map
    assert "37,340 of 50,368" in again.describe() and again.embedding_source() is None and again.transfers


@pytest.mark.slow
def test_vt_onto_u_copies_each_row_from_the_same_token_and_u_has_no_case_variants(u, olmo):
    model = TinyModernBert().load_model()
    emb = model.get_input_embeddings().weight.detach().clone()
    with torch.no_grad():
        model.get_output_embeddings().bias.normal_(generator=torch.Generator().manual_seed(0))
    bias = model.get_output_embeddings().bias.detach().clone()
    report = apply_transfer(
        model, olmo, u, Subword(), None, None, TransferOptions(bias="init", target_norm=False, fuzzy=False, seed=0)
    )
    source = torch.tensor(olmo.convert_tokens_to_ids(u.convert_ids_to_tokens(list(range(len(u))))))
    # OLMo's role-less specials (<|padding|>, <|endoftext|>): match_vocabularies pairs specials by role only, so these
    # two get Subword's overlap mean instead of their own row; every other row is copied
    roleless = [u.convert_tokens_to_ids(t) for t in ("<|padding|>", "<|endoftext|>")]
    copied = torch.tensor([i for i in range(len(u)) if i not in roleless])
    assert report["overlap"]["n_new"] <= len(roleless) and report["init"]["subword"] == 0
    assert torch.equal(model.get_input_embeddings().weight.detach()[copied], emb[source[copied]])
    assert torch.equal(model.get_output_embeddings().bias.detach()[copied], bias[source[copied]])

    assert case_groups(u) == [] and len(case_groups(olmo)) > 7000
    report = case_handling(model, u, ["The Apple and the apple.", "THE END of the End"])
    assert report["case_groups"] == 0 and report["row_cosine"] is None and report["doc_mass_on_variants"] == 0.0


def test_the_configs_build_u_and_m_unc_mirrors_m_bpe():
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    vocab = instantiate(compose_config(["vocab=olmo-lowercase"]).vocab)
    assert isinstance(vocab, LowercaseVocab) and isinstance(vocab.source, TinyModernBert) and vocab.preprocess is None
    unc, bpe = (compose_config([f"backbone={b}"]).backbone for b in ("testbed-unc", "testbed-bpe"))
    assert unc.name == "testbed-unc" and unc.start.vocab.name == "olmo-lowercase"
    unc_c, bpe_c = OmegaConf.to_container(unc), OmegaConf.to_container(bpe)
    differ = {k for k in unc_c | bpe_c if unc_c.get(k) != bpe_c.get(k)}
    assert differ == {"name", "start"}
    assert {k for k in unc_c["start"] if unc_c["start"][k] != bpe_c["start"][k]} == {"vocab"}


@pytest.mark.slow
def test_m_unc_start_is_splade_tiny_on_u_with_no_case_variants(shared_cache):
    """The real M_unc start (SPLADE-tiny moved onto U by FVT, no MLM): the saved model lowercases its own input."""
    from hydra.utils import instantiate

    start = instantiate(compose_config(["backbone=testbed-unc"]).backbone.start)
    model, tokenizer = start.load_model(), start.load_tokenizer()
    assert len(tokenizer) == U_SIZE == model.config.vocab_size
    assert tokenizer.tokenize("Hello WORLD") == ["Ġhello", "Ġworld"]
    report = case_handling(model, tokenizer, ["The Apple and the apple.", "THE END"])
    assert report["case_groups"] == 0 and report["doc_mass_on_variants"] == 0.0


def _case(groups, cosine, mass):
    return {"case_groups": groups, "row_cosine": cosine, "doc_mass_on_variants": mass}


def test_case_gate_checks_m_unc_as_the_mirror_of_m_wp():
    mirror = {"M_wp": _case(0, None, 0.0), "M_bpe": _case(8000, 0.8, 0.05), "M_unc": _case(0, None, 0.0)}
    assert gates.check_case(mirror) is None
    with pytest.raises(gates.GateError, match="M_unc's vocabulary has 3 case-variant groups"):
        gates.check_case({**mirror, "M_unc": _case(3, 0.9, 0.02)})


def test_control_gate_allows_a_small_loss_against_the_start_only():
    as_is = 0.8728
    assert gates.check_control(as_is - 0.004, as_is) == {"wp_native": as_is - 0.004, "as_is": as_is}
    assert gates.check_control(as_is + 0.01, as_is)["wp_native"] == as_is + 0.01
    with pytest.raises(gates.GateError) as failed:
        gates.check_control(as_is - 0.006, as_is, "outputs/main")
    message = str(failed.value)
    assert "\n" not in message and "0.8668" in message and "0.8728" in message and "0.0060 below" in message
    assert "worse than its start" in message and "outputs/main" in message
