"""Canonical forms and vocabulary overlap on the real offline tokenizers (bert-uncased, OLMo BPE, GPT-2 BPE)."""

import numpy as np
import pytest

from vtlab.core.errors import AssetError
from vtlab.vocab.canonical import (
    BYTES_MARK,
    bytelevel_bytes,
    canonical_form,
    canonical_vocab,
    match_vocabularies,
    special_token_pairs,
    tokenizer_kind,
)


def _load(make):
    try:
        return make()
    except AssetError as e:
        pytest.skip(f"offline asset missing: {e}")


@pytest.fixture(scope="module")
def bert():
    from vtlab.backbones import Backbone

    return _load(lambda: Backbone("asset:minilm").load_tokenizer())


@pytest.fixture(scope="module")
def olmo():
    from vtlab.backbones import TinyModernBert

    return _load(lambda: TinyModernBert().load_tokenizer())


@pytest.fixture(scope="module")
def gpt2():
    from vtlab.backbones import TinyRoberta

    return _load(lambda: TinyRoberta().load_tokenizer())


@pytest.fixture(scope="module")
def sentencepiece():
    """A tiny Metaspace + Unigram tokenizer (SentencePiece layout), built locally."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import Unigram
    from transformers import PreTrainedTokenizerFast

    pieces = [
        ("<unk>", 0.0),
        ("<s>", 0.0),
        ("</s>", 0.0),
        ("<pad>", 0.0),
        ("▁apple", -1.0),
        ("apple", -2.0),
        ("▁", -3.0),
        ("s", -3.0),
        ("▁Apple", -4.0),
        ("<0x0A>", -5.0),
        ("a", -5.0),
        ("p", -5.0),
        ("l", -5.0),
        ("e", -5.0),
    ]
    tk = Tokenizer(Unigram(pieces, unk_id=0, byte_fallback=True))
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


# -- canonical forms ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "token,form", [("##ing", "ing"), ("apple", "▁apple"), ("##", "▁##"), ("[unused0]", "▁[unused0]")]
)
def test_wordpiece_forms(token, form):
    assert canonical_form(token, "wordpiece") == form


@pytest.mark.parametrize(
    "token,form",
    [
        ("Ġapple", "▁apple"),
        ("apple", "apple"),
        ("Ġ", "▁"),  # a lone space: the bare word boundary (equals SentencePiece's "▁")
        ("ĠĠ", "▁ "),  # two spaces, as SentencePiece "▁▁"
        ("Ċ", "\n"),  # byte 0x0A
        ("âĢĻ", "’"),  # E2 80 99, a right single quote
        ("ĠâĢĻ", "▁’"),
    ],
)
def test_bytelevel_forms(token, form):
    assert canonical_form(token, "bytelevel") == form


def test_bytelevel_partial_utf8_never_matches_text():
    assert bytelevel_bytes("âĢ") == b"\xe2\x80"
    form = canonical_form("âĢ", "bytelevel")
    assert form.startswith(BYTES_MARK) and form != canonical_form("âĢ", "wordpiece")
    assert canonical_form("Ġâ", "bytelevel") != canonical_form("Ġâ", "sentencepiece")


@pytest.mark.parametrize("token,form", [("▁apple", "▁apple"), ("apple", "apple"), ("▁", "▁"), ("▁▁", "▁ ")])
def test_sentencepiece_forms(token, form):
    assert canonical_form(token, "sentencepiece") == form


def test_sentencepiece_byte_fallback_is_bytes():
    assert canonical_form("<0x0A>", "sentencepiece") == "\n" == canonical_form("Ċ", "bytelevel")
    assert canonical_form("<0xE2>", "sentencepiece").startswith(BYTES_MARK)


def test_unknown_kind():
    with pytest.raises(ValueError, match="kind"):
        canonical_form("x", "morfessor")


def test_tokenizer_kinds(bert, olmo, gpt2, sentencepiece):
    assert tokenizer_kind(bert) == "wordpiece"
    assert tokenizer_kind(olmo) == "bytelevel"
    assert tokenizer_kind(gpt2) == "bytelevel"
    assert tokenizer_kind(sentencepiece) == "sentencepiece"


def test_canonical_vocab_skips_specials_and_keeps_added_text(olmo):
    forms = canonical_vocab(olmo)
    assert olmo.cls_token_id not in forms and olmo.convert_tokens_to_ids("<|endoftext|>") not in forms
    assert forms[olmo.convert_tokens_to_ids("[unused0]")] == "▁[unused0]"  # added tokens are raw text
    assert forms[olmo.convert_tokens_to_ids("Ġthe")] == "▁the"


# -- overlap -----------------------------------------------------------------------------------------------------------
def _pairs(overlap):
    return dict(zip(overlap.target_ids.tolist(), overlap.source_ids.tolist()))


def test_special_pairs_by_role(olmo, gpt2, bert):
    want = {
        bert.cls_token_id: olmo.cls_token_id,
        bert.sep_token_id: olmo.sep_token_id,
        bert.pad_token_id: olmo.pad_token_id,
        bert.mask_token_id: olmo.mask_token_id,
        bert.unk_token_id: olmo.unk_token_id,
    }
    assert special_token_pairs(olmo, bert) == want
    pairs = special_token_pairs(gpt2, bert)  # RoBERTa layout: <s> plays cls, </s> plays sep
    assert pairs[bert.cls_token_id] == gpt2.convert_tokens_to_ids("<s>")
    assert pairs[bert.sep_token_id] == gpt2.convert_tokens_to_ids("</s>")
    assert pairs[bert.mask_token_id] == gpt2.convert_tokens_to_ids("<mask>")


def test_olmo_to_bert_exact(olmo, bert):
    ov = match_vocabularies(olmo, bert)
    pairs = _pairs(ov)
    tid = bert.convert_tokens_to_ids
    assert pairs[tid("the")] == olmo.convert_tokens_to_ids("Ġthe")
    assert pairs[tid("##s")] == olmo.convert_tokens_to_ids("s")
    assert pairs[tid("[CLS]")] == olmo.cls_token_id and pairs[tid("[MASK]")] == olmo.mask_token_id
    assert pairs[tid("[unused0]")] == olmo.convert_tokens_to_ids("[unused0]")
    assert tid("[unused83]") in ov.new_target_ids  # ModernBERT has [unused0]..[unused82] only
    assert ov.target_ids.dtype == np.int64 and ov.source_ids.dtype == np.int64
    assert len(np.unique(ov.target_ids)) == ov.target_ids.size
    assert ov.n_special == 5 and ov.n_fuzzy == 0 and ov.n_matched == ov.n_special + ov.n_exact
    rep = ov.report()
    assert rep["source_size"] == len(olmo) == 50368 and rep["target_size"] == 30522
    assert rep["n_new"] == ov.new_target_ids.size == 30522 - ov.n_matched
    # measured with transformers 5.24 / tokenizers 0.23.3: 17,265 exact + 5 special (56.6%)
    assert 16_000 < ov.n_exact < 19_000 and 0.5 < rep["coverage"] < 0.65


@pytest.mark.slow
def test_fuzzy_adds_case_variants_only_for_unmatched(olmo, gpt2, bert):
    for source in (olmo, gpt2):
        exact, fuzzy = match_vocabularies(source, bert), match_vocabularies(source, bert, fuzzy=True)
        e, f = _pairs(exact), _pairs(fuzzy)
        assert {t: f[t] for t in e} == e  # exact matches are never replaced
        added = set(f) - set(e)
        assert len(added) == fuzzy.n_fuzzy > 1000 and fuzzy.n_exact == exact.n_exact
        assert len(np.unique(fuzzy.target_ids)) == fuzzy.target_ids.size
        src_forms, tgt_forms = canonical_vocab(source), canonical_vocab(bert)
        for t in added:
            a, b = tgt_forms[t], src_forms[f[t]]
            assert a != b and a.removeprefix("▁").casefold() == b.removeprefix("▁").strip().casefold()
    # a capitalised name: BERT "worcester" has no lowercase OLMo form, so it takes "ĠWorcester"
    w = bert.convert_tokens_to_ids("worcester")
    ov = _pairs(match_vocabularies(olmo, bert, fuzzy=True))
    assert w in ov and olmo.convert_ids_to_tokens(ov[w]) == "ĠWorcester"


def test_gpt2_to_bert_counts(gpt2, bert):
    ov = match_vocabularies(gpt2, bert)
    assert ov.n_special == 5 and 17_000 < ov.n_exact < 19_500  # measured: 18,161
    assert ov.source_size == len(gpt2) == 50261


def test_identity(bert):
    ov = match_vocabularies(bert, bert, fuzzy=True)
    assert ov.n_matched == 30522 and ov.new_target_ids.size == 0 and ov.n_fuzzy == 0
    assert np.array_equal(ov.target_ids, ov.source_ids)
    assert ov.report()["coverage"] == 1.0


def test_sentencepiece_matches_bytelevel(olmo, sentencepiece):
    pairs = _pairs(match_vocabularies(olmo, sentencepiece))
    sid = sentencepiece.convert_tokens_to_ids
    assert pairs[sid("▁apple")] == olmo.convert_tokens_to_ids("Ġapple")
    assert pairs[sid("▁")] == olmo.convert_tokens_to_ids("Ġ")
    assert pairs[sid("<0x0A>")] == olmo.convert_tokens_to_ids("Ċ")
    assert pairs[sid("<s>")] == olmo.cls_token_id and pairs[sid("</s>")] == olmo.sep_token_id
