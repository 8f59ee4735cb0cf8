"""Canonical forms and vocabulary overlap on the real offline tokenizers (bert-uncased, OLMo BPE, GPT-2 BPE, e5's
SentencePiece)."""

import numpy as np
import pytest
from helpers import need

from vtlab.vocab.canonical import (
    BYTES_MARK,
    bytelevel_bytes,
    canonical_form,
    canonical_vocab,
    match_vocabularies,
    punct_key,
    special_token_pairs,
    tokenizer_kind,
)


def _load(make):
    return need(make)


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
def e5():
    from vtlab.backbones import E5Small

    return _load(lambda: E5Small().load_tokenizer())


def _unigram(*pieces: str):
    """A tiny Metaspace + Unigram tokenizer (SentencePiece layout), built locally: ids 0-3 are <unk> <s> </s> <pad>,
    then `pieces` in order (id 4, 5, …)."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import Unigram
    from transformers import PreTrainedTokenizerFast

    scored = [(p, 0.0) for p in ("<unk>", "<s>", "</s>", "<pad>")] + [(p, -1.0 - k) for k, p in enumerate(pieces)]
    tk = Tokenizer(Unigram(scored, unk_id=0, byte_fallback=True))
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


@pytest.fixture(scope="module")
def sentencepiece():
    return _unigram("▁apple", "apple", "▁", "s", "▁Apple", "<0x0A>", "a", "p", "l", "e")


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
    assert ov.n_special == 5 and ov.n_fuzzy == 0 and ov.n_matched == ov.n_special + ov.n_exact + ov.n_punct
    assert pairs[tid("¢")] == olmo.convert_tokens_to_ids("Â¢")  # "▁¢" has no OLMo form; the attached "¢" is taken
    rep = ov.report()
    assert rep["source_size"] == len(olmo) == 50368 and rep["target_size"] == 30522
    assert rep["n_new"] == ov.new_target_ids.size == 30522 - ov.n_matched
    # measured with transformers 5.24 / tokenizers 0.23.3: 17,265 exact + 36 punctuation + 5 special (56.7%)
    assert 16_000 < ov.n_exact < 19_000 and 20 < ov.n_punct < 60 and 0.5 < rep["coverage"] < 0.65


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
    assert 10 < ov.n_punct < 50  # measured: 25 ("▁¢" ← "Â¢", …)
    assert ov.source_size == len(gpt2) == 50261


def test_identity(bert):
    ov = match_vocabularies(bert, bert, fuzzy=True)
    assert ov.n_matched == 30522 and ov.new_target_ids.size == 0 and ov.n_fuzzy == 0 and ov.n_punct == 0
    assert np.array_equal(ov.target_ids, ov.source_ids)
    assert ov.report()["coverage"] == 1.0


def test_sentencepiece_matches_bytelevel(olmo, sentencepiece):
    pairs = _pairs(match_vocabularies(olmo, sentencepiece))
    sid = sentencepiece.convert_tokens_to_ids
    assert pairs[sid("▁apple")] == olmo.convert_tokens_to_ids("Ġapple")
    assert pairs[sid("▁")] == olmo.convert_tokens_to_ids("Ġ")
    assert pairs[sid("<0x0A>")] == olmo.convert_tokens_to_ids("Ċ")
    assert pairs[sid("<s>")] == olmo.cls_token_id and pairs[sid("</s>")] == olmo.sep_token_id


# -- punctuation across word markers -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "form,key",
    [
        (",", ","),
        ("▁,", ","),
        ("▁ ,", ","),  # SentencePiece "▁▁,"
        (", ", ","),  # SentencePiece ",▁"
        ("▁...", "..."),
        ("▁$", "$"),  # a symbol (Sc)
        ("’", "’"),
        ("▁¢", "¢"),
        ("▁→", "→"),
        ("apple", ""),
        ("▁apple", ""),
        ("▁a.", ""),  # a letter among the punctuation
        ("▁1,000", ""),
        ("▁", ""),
        ("▁ ", ""),
        ("\n", ""),
        ("", ""),
    ],
)
def test_punct_key(form, key):
    assert punct_key(form) == key


def test_punct_key_never_reads_byte_strings():
    assert punct_key(canonical_form("âĢ", "bytelevel")) == "" and punct_key(BYTES_MARK + "2c") == ""


# The reference pairs below are written down by hand (bert-base-uncased ids: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102,
# "$" 1002, "," 1010, "." 1012, "apple" 6207, "##apple" 23804, "##$" 29615, "##," 29623, "##." 29625).
BERT_IDS = {"$": 1002, ",": 1010, ".": 1012, "apple": 6207, "##apple": 23804, "##$": 29615, "##,": 29623, "##.": 29625}
SPECIALS = {0: 3, 100: 0, 101: 1, 102: 2}  # [PAD] ← <pad>, [UNK] ← <unk>, [CLS] ← <s>, [SEP] ← </s>; no <mask>


def test_bert_ids_of_the_reference(bert):
    assert {t: bert.convert_tokens_to_ids(t) for t in BERT_IDS} == BERT_IDS


def test_standalone_punctuation_copies_the_attached_source_row(bert):
    source = _unigram(",", ".", "$", "apple")  # ids 4, 5, 6, 7: attached forms only
    ov = match_vocabularies(source, bert)
    assert _pairs(ov) == {
        **SPECIALS,
        29623: 4,  # "##," = "," exact
        29625: 5,  # "##." = "." exact
        29615: 6,  # "##$" = "$" exact
        23804: 7,  # "##apple" = "apple" exact
        1010: 4,  # "," = "▁," ← "," (punctuation rule)
        1012: 5,  # "." = "▁." ← "."
        1002: 6,  # "$" = "▁$" ← "$"
    }
    assert (ov.n_special, ov.n_exact, ov.n_punct, ov.n_fuzzy, ov.n_matched) == (4, 4, 3, 0, 11)
    rep = ov.report()
    assert rep["n_punct"] == 3 and rep["n_matched"] == 11 and rep["n_new"] == 30522 - 11
    assert 6207 in ov.new_target_ids  # a word with the other marker: "▁apple" ≠ "apple", only fuzzy pairs them


def test_punctuation_rule_leaves_words_to_fuzzy(bert):
    source = _unigram(",", ".", "$", "apple")
    ov = match_vocabularies(source, bert, fuzzy=True)
    pairs = _pairs(ov)
    assert pairs[6207] == 7 and (ov.n_exact, ov.n_punct, ov.n_fuzzy) == (4, 3, 1)  # "apple" by fuzzy, not by the rule
    assert {t: pairs[t] for t in (1010, 1012, 1002)} == {1010: 4, 1012: 5, 1002: 6}


def test_punctuation_prefers_the_same_word_marker_then_the_lowest_id(bert):
    # ids 4..8; canonical forms ", " (no marker), "▁ ,", "▁, " (marker), ". " (no marker), "▁ ." (marker)
    source = _unigram(",▁", "▁▁,", "▁,▁", ".▁", "▁▁.")
    ov = match_vocabularies(source, bert)
    assert _pairs(ov) == {
        **SPECIALS,
        1010: 5,  # "▁,": the marked "▁ ," and "▁, " before the unmarked ", " (4); the lower id of the two
        29623: 4,  # "##," = ",": the unmarked ", " first
        1012: 8,  # "▁.": the marked "▁ ." although the unmarked ". " has the lower id (7)
        29625: 7,  # "##." = ".": the unmarked ". "
    }
    assert (ov.n_exact, ov.n_punct) == (0, 4)


@pytest.mark.slow
def test_e5_to_bert_uncased_takes_e5_punctuation(e5, bert):
    """The real-case VT (backbone=e5-small, vocab=minilm-bert-uncased): e5's pruned XLM-R vocabulary has only the
    attached "," and "." (ids 4, 5), which 9% of BoolQ's clean training passage tokens are as WordPiece "," and "."."""
    ov = match_vocabularies(e5, bert)
    pairs = _pairs(ov)
    assert e5.convert_ids_to_tokens([4, 5]) == [",", "."] and pairs[1010] == 4 and pairs[1012] == 5
    assert pairs[bert.convert_tokens_to_ids("?")] == e5.convert_tokens_to_ids("?")
    assert pairs[bert.convert_tokens_to_ids("##→")] == e5.convert_tokens_to_ids("▁→")  # the other way round
    # measured: 9,045 exact + 35 punctuation + 5 special = 9,085 of 30,522 (21,437 new)
    assert (ov.n_special, ov.n_exact, ov.n_punct, ov.n_matched) == (5, 9045, 35, 9085)
