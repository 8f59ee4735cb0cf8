"""`vtlab diagnose`: tokenizer fit and vocabulary redundancy against hand-computed values on a 5-sentence corpus,
output-space activity against a direct computation, the verdict, and the report of a real multirun."""

import json
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import compose_config, run_vtlab
from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE, WordPiece
from transformers import PreTrainedTokenizerFast

from vtlab.apc.calibration import APC
from vtlab.backbones import Backbone
from vtlab.core.errors import DataError, VtlabError
from vtlab.diagnose.__main__ import main as diagnose_main
from vtlab.diagnose.activity import output_activity
from vtlab.diagnose.corpus import load_corpus
from vtlab.diagnose.redundancy import redundancy
from vtlab.diagnose.sparsity import Place, apc_effect
from vtlab.diagnose.tokenizer_fit import tokenize_corpus, tokenizer_fit
from vtlab.diagnose.verdict import rank, suggest
from vtlab.models.encoder import SpladeEncoder
from vtlab.vocab.canonical import _byte_alphabet

pytestmark = pytest.mark.usefixtures("shared_cache")

# Whitespace words (17): S1 The cat sat on the mat. | S2 The dogs ran. | S3 A cat, a dog. | S4 Unbelievable cats!
# | S5 Привет мир.   Cores (surrounding punctuation stripped): "mat." → mat, "cat," → cat, "cats!" → cats, …
# 15 Latin words, 2 Cyrillic. 15 distinct cores: The ×2, cat ×2, the other 13 once.
CORPUS = ["The cat sat on the mat.", "The dogs ran.", "A cat, a dog.", "Unbelievable cats!", "Привет мир."]


# -- hand-made tokenizers ----------------------------------------------------------------------------------------------
WP_VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "cat",
    "sat",
    "on",
    "mat",
    "a",
    "dog",
    "ran",
    "##s",
    "un",
    "##bel",
    "##iev",
    "##able",
    ".",
    ",",
    "s",
    "able",
]


def wordpiece_uncased() -> PreTrainedTokenizerFast:
    tk = Tokenizer(WordPiece({t: i for i, t in enumerate(WP_VOCAB)}, unk_token="[UNK]"))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )


BYTE_CHAR = {b: c for c, b in _byte_alphabet().items()}  # byte → GPT-2's stand-in character
BPE_WORDS = [
    "The",
    "the",
    "Ġthe",
    "ĠThe",
    "Ġcat",
    "ĠCat",
    "Ġsat",
    "Ġon",
    "Ġmat",
    "Ġdogs",
    "Ġran",
    "Ġa",
    "Ġdog",
    "Ġcats",
]
# single characters: what the corpus needs beyond BPE_WORDS ("Unbelievable" letters, punctuation, the space "Ġ")
BPE_CHARS = ["A", "U", "n", "b", "e", "l", "i", "v", "a", ".", ",", "!", "Ġ"]
CYRILLIC_BYTES = sorted({BYTE_CHAR[b] for b in "Привет мир".encode()} - {"Ġ"})  # 9 bytes: D0 D1 9F 80 B8 B2 B5 82 BC


def bytelevel_cased() -> PreTrainedTokenizerFast:
    """A GPT-2-style byte-level BPE, cased, with no merges: a pre-token is one token if in the vocabulary
    (ignore_merges), else one token per byte character."""
    vocab = ["<s>", "</s>", "<pad>", *BPE_WORDS, *BPE_CHARS, *CYRILLIC_BYTES]
    tk = Tokenizer(BPE({t: i for i, t in enumerate(vocab)}, [], ignore_merges=True))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


# -- tokenizer fit -----------------------------------------------------------------------------------------------------
def test_fit_wordpiece_uncased_hand_computed():
    tok = wordpiece_uncased()
    # Tokens (lowercased; BertPreTokenizer splits punctuation; "!" and the Cyrillic words are not in the vocabulary):
    #   S1 the cat sat on the mat .           7  (mat. = 2 pieces)
    #   S2 the dog ##s ran .                  5  (dogs = 2, ran. = 2)
    #   S3 a cat , a dog .                    6  (cat, = 2, dog. = 2)
    #   S4 un ##bel ##iev ##able cat ##s [UNK]  7 (Unbelievable = 4, cats! = 3)
    #   S5 [UNK] [UNK] .                      3  (мир. = 2)
    # 28 tokens / 17 words = 1.6471. Cores in ≥3 pieces: Unbelievable (4) only → 1/17. [UNK]: 3/28.
    # Frequent words (all 15 cores) as ONE KNOWN token: all but dogs (2), Unbelievable (4), cats (2), and Привет, мир
    # (one token, but [UNK]) → 10/15. Per script: Latin 25 tokens / 15 words, 1 [UNK] of 25; Cyrillic 3 / 2, 2 of 3.
    fit = tokenizer_fit(tok, tokenize_corpus(tok, CORPUS), top_words=100)
    assert (fit["words"], fit["tokens"], fit["unassigned_tokens"]) == (17, 28, 0)
    assert fit["fertility"] == pytest.approx(28 / 17)
    assert fit["split3_share"] == pytest.approx(1 / 17)
    assert fit["unk_rate"] == pytest.approx(3 / 28) and fit["byte_fallback_rate"] == 0.0
    assert fit["top_words"] == 15 and fit["frequent_single_token_share"] == pytest.approx(10 / 15)
    assert fit["core_pieces_hist"] == {"0": 0, "1": 14, "2": 2, "3": 0, "4": 1, "5+": 0}
    assert fit["multilingual"] is True
    latin, cyrillic = fit["scripts"]["LATIN"], fit["scripts"]["CYRILLIC"]
    assert (latin["words"], cyrillic["words"]) == (15, 2)
    assert latin["fertility"] == pytest.approx(25 / 15) and latin["unk_or_byte_rate"] == pytest.approx(1 / 25)
    assert cyrillic["fertility"] == pytest.approx(3 / 2) and cyrillic["unk_or_byte_rate"] == pytest.approx(2 / 3)
    # top-2 words: The (2×) and cat (2×), both one token
    assert tokenizer_fit(tok, tokenize_corpus(tok, CORPUS), top_words=2)["frequent_single_token_share"] == 1.0


def test_fit_bytelevel_cased_hand_computed():
    tok = bytelevel_cased()
    # Pre-tokens (GPT-2 regex, "Ġ" = a leading space) → tokens:
    #   S1 The Ġcat Ġsat Ġon Ġthe Ġmat .                 7
    #   S2 The Ġdogs Ġran .                              4
    #   S3 A Ġcat , Ġa Ġdog .                            6
    #   S4 U n b e l i e v a b l e (12) Ġcats !           14  (not in the vocabulary: one token per character)
    #   S5 12 bytes of "Привет", Ġ + 6 bytes of "мир", .  20  (each byte of a 2-byte letter is a fragment)
    # 51 tokens / 17 words = 3.0 (the lone "Ġ" counts for the word after it). Cores in ≥3 pieces: Unbelievable (12),
    # Привет (12), мир (6) → 3/17. Fragments: 12 + 6 = 18 of 51 tokens; no unknown token (byte-level).
    # Frequent words as one known token: all but Unbelievable, Привет, мир → 12/15.
    # Per script: Latin 31 tokens / 15 words, Cyrillic 20 / 2 = 10 with 18 fragments of 20, both words ≥3 pieces.
    fit = tokenizer_fit(tok, tokenize_corpus(tok, CORPUS), top_words=100)
    assert (fit["words"], fit["tokens"]) == (17, 51)
    assert fit["fertility"] == pytest.approx(3.0)
    assert fit["split3_share"] == pytest.approx(3 / 17)
    assert fit["unk_rate"] == 0.0 and fit["byte_fallback_rate"] == pytest.approx(18 / 51)
    assert fit["frequent_single_token_share"] == pytest.approx(12 / 15)
    latin, cyrillic = fit["scripts"]["LATIN"], fit["scripts"]["CYRILLIC"]
    assert latin["fertility"] == pytest.approx(31 / 15) and latin["unk_or_byte_rate"] == 0.0
    assert cyrillic["fertility"] == pytest.approx(10.0) and cyrillic["unk_or_byte_rate"] == pytest.approx(18 / 20)
    assert cyrillic["split3_share"] == 1.0
    split = {e["word"]: e["tokens"] for e in fit["frequent_split_examples"]}
    assert split["Unbelievable"] == list("Unbelievable")


def test_fit_counts_whitespace_tokens_and_preprocess():
    # "a  cat": the second space is its own pre-token "Ġ" (GPT-2 regex \s+(?!\S)), attached to "cat" → 3 tokens, 2 words
    tok = bytelevel_cased()
    fit = tokenizer_fit(tok, tokenize_corpus(tok, ["a  cat"]))
    assert (fit["tokens"], fit["words"], fit["fertility"]) == (3, 2, 1.5)
    # the preprocess runs before tokenizing: " cat" → one token "Ġcat"
    assert tokenizer_fit(tok, tokenize_corpus(tok, ["cat"], preprocess=lambda t: " " + t))["tokens"] == 1


# -- redundancy --------------------------------------------------------------------------------------------------------
def test_redundancy_wordpiece_uncased_hand_computed():
    tok = wordpiece_uncased()
    red = redundancy(tok, tokenize_corpus(tok, CORPUS).ids)
    # 17 non-special entries; normalized forms: s ← {s, ##s}, able ← {able, ##able}, the other 13 alone → 15 forms,
    # 2 with >1 surface form, both merged by the word-initial marker only (uncased: nothing to merge by case).
    v = red["vocab"]
    assert (v["entries"], v["normalized_forms"]) == (17, 15)
    assert (v["collapsing_forms"], v["entries_in_collapsing_forms"]) == (2, 4)
    assert (v["merged_by_marker"], v["merged_by_case"], v["unnormalizable"]) == (2, 0, 0)
    assert v["effective_dims"] == 15 and v["max_surface_forms"] == 2
    assert v["surface_forms_hist"] == {"1": 13, "2": 2, "3": 0, "4": 0, "5+": 0}
    # the corpus only uses "##s" (dogs, cats), never "s": every form is written with one entry
    c = red["corpus"]
    assert c["split_forms"] == 0 and c["spread_mass_share"] == 0.0 and c["split_mass_share"] == 0.0


def test_redundancy_bytelevel_cased_hand_computed():
    tok = bytelevel_cased()
    red = redundancy(tok, tokenize_corpus(tok, CORPUS).ids)
    # 36 entries = 14 words + 13 characters + 9 Cyrillic bytes. No normalized form: "Ġ" (bare space) and the 9 bytes
    # (fragments) → 10. The other 26 → 20 forms: the ← {The, the, Ġthe, ĠThe}, a ← {A, a, Ġa}, cat ← {Ġcat, ĠCat},
    # 17 alone. Without the marker but cased there are 23 forms (The, the, a, A, cat, Cat, …): 26 − 23 = 3 merged
    # by the marker (the/Ġthe, The/ĠThe, a/Ġa), 23 − 20 = 3 by case. Effective dims 20 + 10 = 30.
    v = red["vocab"]
    assert (v["entries"], v["unnormalizable"], v["normalized_forms"], v["marker_forms"]) == (36, 10, 20, 23)
    assert (v["collapsing_forms"], v["entries_in_collapsing_forms"]) == (3, 9)
    assert (v["merged_by_marker"], v["merged_by_case"], v["effective_dims"], v["max_surface_forms"]) == (3, 3, 30, 4)
    assert sorted(v["largest_forms"][0]["tokens"]) == sorted(["The", "the", "Ġthe", "ĠThe"])
    # Corpus (51 tokens): "the" written The ×2 + Ġthe ×1, "a" written A, Ġa, a (in Unbelievable) once each; "cat" only
    # as Ġcat. Off the main entry: the 1 (Ġthe), a 2 → 3/51; in forms with ≥2 entries: 3 + 3 = 6/51.
    c = red["corpus"]
    assert c["split_forms"] == 2
    assert c["spread_mass_share"] == pytest.approx(3 / 51) and c["split_mass_share"] == pytest.approx(6 / 51)
    assert {e["form"]: e["surfaces"] for e in c["split_examples"]}["the"] == [["The", 2], ["Ġthe", 1]]


def test_real_vocabularies_bert_uncased_vs_cased_bpe():
    """The shipped tokenizers: bert-base-uncased maps 'the' to {the, ##the}; the cased OLMo BPE to six entries."""
    from vtlab.core.assets import asset_path

    bert = Backbone("asset:minilm").load_tokenizer()
    olmo = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(str(asset_path("olmo-tokenizer"))))
    texts = ["The cat sat on the mat."]
    forms = {}
    for name, tok in (("bert", bert), ("olmo", olmo)):
        red = redundancy(tok, tokenize_corpus(tok, texts).ids)
        forms[name] = {e["form"]: sorted(e["tokens"]) for e in red["vocab"]["largest_forms"]}
        red["vocab"]["largest_forms"] = []
        forms[name + "_vocab"] = red["vocab"]
    bert_v, olmo_v = forms["bert_vocab"], forms["olmo_vocab"]
    # bert-uncased: nothing merged by case, at most a word-initial/continuation pair for ordinary words
    assert bert_v["merged_by_case"] < 50 < bert_v["merged_by_marker"]
    assert olmo_v["merged_by_case"] > 5000 and olmo_v["mean_surface_forms"] > bert_v["mean_surface_forms"] + 0.3
    the = redundancy(olmo, tokenize_corpus(olmo, texts).ids)["corpus"]["split_examples"]
    assert {e["form"]: sorted(t for t, _ in e["surfaces"]) for e in the}["the"] == ["The", "Ġthe"]
    assert "THE" in olmo.get_vocab() and "ĠTHE" in olmo.get_vocab() and "##the" in bert.get_vocab()


# -- activity ----------------------------------------------------------------------------------------------------------
def _direct_figures(z: torch.Tensor) -> dict[str, float]:
    """Reference, the slow way: the full N×V activity matrix and the N×N cosine matrix."""
    active = z > 0
    w = torch.log1p(torch.relu(z)).double()
    u = w / w.norm(dim=1, keepdim=True)
    cos = u @ u.T
    n = z.shape[0]
    freq = active.double().mean(0)
    return {
        "mean_active_per_doc": float(active.sum(1).double().mean()),
        "dead_fraction": float((freq == 0).double().mean()),
        "always_on_fraction": float((freq >= 0.99).double().mean()),
        "mean_pairwise_cosine": float((cos.sum() - cos.diagonal().sum()) / (n * (n - 1))),
    }


PROBE_TEXTS = [
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "The 1998 World Cup final was played at the Stade de France in Saint-Denis.",
    "Mitochondria are membrane-bound organelles that generate most of the cell's supply of ATP.",
    "A sonnet is a poetic form of fourteen lines that originated in Italy.",
    "The Amazon River in South America is the largest river by discharge volume of water.",
    "Python is a high-level programming language whose design emphasizes code readability.",
    "In economics, inflation is a general increase in the prices of goods and services.",
]


@pytest.mark.slow
def test_activity_matches_direct_computation_before_and_after_apc():
    texts = PROBE_TEXTS
    encoder = SpladeEncoder.from_backbone(Backbone("asset:splade-tiny"), doc_max_length=48)
    with torch.inference_mode():
        enc = encoder.tokenize(texts, "doc")
        z = encoder.max_logits(enc["input_ids"], enc["attention_mask"]).float()
    apc = APC(percentile=60, include_zeros=True, num_docs=8, max_length=48, batch_size=3)
    act = output_activity(encoder, texts, apc)
    cut = act["apc"]["cutoff"]
    for state, ref in (("before", _direct_figures(z)), ("after", _direct_figures(z - cut))):
        for key, value in ref.items():
            assert act[state][key] == pytest.approx(value, abs=1e-4), (state, key)
    # APC's own probe statistics are the report's (reused, not recomputed): same active count before
    assert act["apc"]["probe"]["before"]["mean_active_per_doc"] == pytest.approx(act["before"]["mean_active_per_doc"])
    assert act["after"]["positive_share"] == pytest.approx(0.40, abs=0.02)
    assert len(act["max_logit_quantiles"]["after"]) == 101
    # the encoder is left calibrated
    with torch.inference_mode():
        z_after = encoder.max_logits(enc["input_ids"], enc["attention_mask"]).float()
    assert torch.allclose(z_after, z - cut, atol=1e-4)
    # apc=off: probed as is, no "after" state
    off = output_activity(encoder, texts, APC(percentile=None, num_docs=8, max_length=48, batch_size=3))
    assert "after" not in off and off["apc"]["cutoff"] == 0.0
    assert off["before"]["mean_pairwise_cosine"] == pytest.approx(
        _direct_figures(z - cut)["mean_pairwise_cosine"], abs=1e-4
    )


# -- verdict -----------------------------------------------------------------------------------------------------------
def _result(label, fertility, split3, frequent, bad, spread, vocab="native", apc="off"):
    return {
        "candidate": {
            "label": label,
            "backbone": label,
            "vocab": vocab,
            "init": "auto",
            "apc": apc,
            "apc_enabled": apc != "off",
            "transfers": vocab != "native",
        },
        "fit": {
            "fertility": fertility,
            "split3_share": split3,
            "frequent_single_token_share": frequent,
            "unk_or_byte_rate": bad,
        },
        "redundancy": {
            "corpus": {
                "spread_mass_share": spread,
                "split_examples": [{"form": "the", "surfaces": [["Ġthe", 9], ["The", 3]]}],
            }
        },
        "activity": None,
    }


def test_verdict_ranks_by_mean_rank_and_suggests_transfer_for_redundant_vocabulary():
    wp = _result("wp", 1.30, 0.04, 0.97, 0.0, 0.02)
    bpe = _result("bpe", 1.28, 0.03, 0.96, 0.003, 0.10)
    bad = _result("bad", 2.00, 0.20, 0.50, 0.10, 0.20)
    ranking = rank([wp, bpe, bad])
    # ranks per criterion (fertility, split3, frequent, unknown, spread): wp 2,2,1,1,1 → 1.4; bpe 1,1,2,2,2 → 1.6;
    # bad 3 everywhere
    assert [e["label"] for e in ranking] == ["wp", "bpe", "bad"]
    assert [e["score"] for e in ranking] == pytest.approx([1.4, 1.6, 3.0])
    assert any("best tokens per word" in r for r in ranking[1]["reasons"])
    # bpe: 10% off the main entry > 5% → transfer; a transfer gets APC
    s = suggest(bpe, {"redundancy_threshold": 0.05})
    assert s["command"] == "python -m vtlab backbone=bpe vocab=bert-uncased init=semantic apc=p60"
    assert suggest(wp)["command"] == "python -m vtlab backbone=wp vocab=native apc=off"


# -- corpus ------------------------------------------------------------------------------------------------------------
def test_corpus_files_and_errors(tmp_path):
    txt = tmp_path / "docs.txt"
    txt.write_text("one doc\n\ntwo doc\none doc\n")
    assert load_corpus({"path": str(txt), "max_docs": None}) == ["one doc", "two doc"]
    assert len(load_corpus({"path": str(txt), "max_docs": 1})) == 1
    jl = tmp_path / "c.jsonl"
    jl.write_text(json.dumps({"title": "T", "text": "body"}) + "\n" + json.dumps({"body": "x"}) + "\n")
    with pytest.raises(DataError, match=r"c\.jsonl:2: no string field 'text'.*diagnose\.corpus\.field"):
        load_corpus({"path": str(jl)})
    with pytest.raises(VtlabError, match=r"diagnose\.corpus\.path='/nope\.txt' does not exist"):
        load_corpus({"path": "/nope.txt"})
    with pytest.raises(VtlabError, match=r"diagnose\.corpus\.path=.*\.csv.*expected a \.txt or \.jsonl file"):
        load_corpus({"path": str(tmp_path / "x.csv")})


# -- the real command --------------------------------------------------------------------------------------------------
@pytest.mark.train
def test_stage_report_with_activity(tmp_path):
    """One run of the stage (in process): the per-run report with the activity section and APC's histogram."""
    from vtlab.stages.pipeline import run

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in CORPUS))
    cfg = compose_config(
        [
            "stage=diagnose",
            "backbone=splade-tiny",
            "vocab=native",
            "apc=p60",
            "logger=none",
            f"paths.run_dir={tmp_path / 'run'}",
            f"diagnose.corpus.path={corpus}",
            "diagnose.activity.num_docs=5",
            "diagnose.activity.max_length=32",
        ]
    )
    state = run(cfg)
    out = tmp_path / "run" / "diagnose"
    assert state["diagnose_dir"] == out
    result = json.loads((out / "diagnose.json").read_text())
    assert result["candidate"]["label"] == "splade-tiny · native" and result["candidate"]["apc_enabled"] is True
    # bert-base-uncased: S1 7 tokens, S2 "the dogs ran ." 4, S3 6, S4 "unbelievable cats !" 3, S5 "п ##р ##и ##в ##е
    # ##т м ##и ##р ." 10 → 30 tokens / 17 words
    assert result["fit"]["fertility"] == pytest.approx(30 / 17)
    assert result["activity"]["docs"] == 5 and len(result["activity"]["after"]["active_per_doc"]) == 5
    for name in (
        "report.md",
        "report.json",
        "fit.png",
        "redundancy.png",
        "activity.png",
        "scripts.png",
        "max_logits.png",
    ):
        assert (out / name).stat().st_size > 0, name
    md = (out / "report.md").read_text()
    assert "## 3. Output-space activity" in md and "p60 (bias" in md


def _diagnose_sweep(tmp: Path, texts: list[str], *overrides: str) -> tuple[Path, subprocess.CompletedProcess]:
    """`python -m vtlab -m stage=diagnose backbone=splade-tiny,tiny-modernbert vocab=native` on `texts`, in
    tmp/sweep."""
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(texts) + "\n")
    sweep = tmp / "sweep"
    proc = run_vtlab(
        "-m",
        "stage=diagnose",
        "backbone=splade-tiny,tiny-modernbert",
        "vocab=native",
        "logger=none",
        f"diagnose.corpus.path={corpus}",
        *overrides,
        f"hydra.sweep.dir={sweep}",
        timeout=300,
    )
    return sweep, proc


@pytest.mark.cli
def test_multirun_writes_jobs_and_combined_report(tmp_path):
    """The documented command: a multirun over backbones; the sweep dir gets the combined report (tokenizer-only here,
    diagnose.activity.num_docs=0, to stay fast), and `python -m vtlab.diagnose DIR` re-renders it."""
    sweep, proc = _diagnose_sweep(tmp_path, CORPUS, "diagnose.activity.num_docs=0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for job in ("0", "1"):
        result = json.loads((sweep / job / "diagnose" / "diagnose.json").read_text())
        assert result["fit"]["words"] == 17 and result["activity"] is None
    out = sweep / "diagnose"
    for name in ("report.md", "report.json", "fit.png", "redundancy.png", "scripts.png"):
        assert (out / name).stat().st_size > 0, name
    md = (out / "report.md").read_text()
    assert "splade-tiny · native" in md and "tiny-modernbert · native" in md
    assert "## 4. Verdict" in md and "python -m vtlab backbone=" in md
    report = json.loads((out / "report.json").read_text())
    labels = [c["candidate"]["label"] for c in report["candidates"]]
    assert labels == ["splade-tiny · native", "tiny-modernbert · native"]
    # the cased OLMo BPE writes "The"/"the" with two entries on this corpus; bert-uncased with one
    spread = {c["candidate"]["label"]: c["redundancy"]["corpus"]["spread_mass_share"] for c in report["candidates"]}
    assert spread["splade-tiny · native"] == 0.0 < spread["tiny-modernbert · native"]
    assert len(report["ranking"]) == len(report["suggestions"]) == 2
    # re-rendering from the job outputs gives the same comparison
    (out / "report.md").unlink()
    assert diagnose_main([str(sweep)]) == 0
    assert "tiny-modernbert · native" in (out / "report.md").read_text()
    assert diagnose_main([str(tmp_path / "empty")]) == 2


# -- sparse starts, random-init backbones ------------------------------------------------------------------------------
# Recent words bert-base-uncased's WordPiece cuts up and the OLMo BPE keeps whole, each written in one form only (no
# sentence-initial repeats): on tokenizer fit alone the random-init tiny-modernbert beats the trained SPLADE-tiny.
MODERN = [
    "new smartphone apps stream podcasts and livestreams",
    "many blockchain startups sell cryptocurrency tokens",
    "most influencers post selfies with hashtags",
    "some platforms recommend binge watching",
    "few emoji keyboards autocorrect texting slang",
]


@pytest.fixture(scope="module")
def apc_sweep(shared_cache, tmp_path_factory):
    """The reported command, `-m stage=diagnose backbone=splade-tiny,tiny-modernbert vocab=native apc=p60`, on MODERN
    with a 5-document probe: (sweep dir, stdout)."""
    tmp = tmp_path_factory.mktemp("apc-sweep")
    sweep, proc = _diagnose_sweep(
        tmp, MODERN, "apc=p60", "diagnose.activity.num_docs=5", "diagnose.activity.max_length=32"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return sweep, proc.stdout


@pytest.mark.cli
def test_diagnose_keeps_apc_off_for_a_sparse_splade_it_would_densify(apc_sweep):
    """The trained SPLADE-tiny is sparse as built; p60 puts 40% of its (doc, term) max-logits above 0, thousands of
    dims per document: the verdict keeps apc=off and says what p60 would do, with the probe's numbers."""
    sweep, stdout = apc_sweep
    result = json.loads((sweep / "0" / "diagnose" / "diagnose.json").read_text())
    assert result["candidate"]["backbone"] == "splade-tiny"
    before, after = result["activity"]["before"], result["activity"]["after"]
    low, high = 1.0, 1000  # conf/diagnose/default.yaml: dead_below, max_active_per_doc (< 5% of 30,522)
    assert low <= before["mean_active_per_doc"] <= 100  # a trained SPLADE on 5-10 word documents
    assert after["mean_active_per_doc"] > 10 * high and after["positive_share"] == pytest.approx(0.40, abs=0.02)
    report = json.loads((sweep / "diagnose" / "report.json").read_text())
    mine = next(s for s in report["suggestions"] if s["label"] == "splade-tiny · native")
    assert mine["args"]["apc"] == "off" and mine["command"].endswith("apc=off")
    assert mine["sparsity"] == {
        "apc": "p60",
        "low": low,
        "high": high,
        "before": before["mean_active_per_doc"],
        "after": after["mean_active_per_doc"],
        "start": "sparse",
        "after_place": "dense",
        "apc_accepted": False,
    }
    densifies = (
        f"apc=p60 takes it to {after['mean_active_per_doc']:,.1f} (dense, "
        f"{after['mean_active_per_doc'] / before['mean_active_per_doc']:,.1f}× as many; "
        f"{after['positive_share']:.1%} of (document, term) max-logits > 0)"
    )
    assert any(
        w.startswith(f"apc=off: already sparse as is ({before['mean_active_per_doc']:,.1f} active dims")
        and "keep apc=off" in w
        and densifies + ": not suggested" in w
        for w in mine["why"]
    ), mine["why"]
    for md in (sweep / "0" / "diagnose" / "report.md", sweep / "diagnose" / "report.md"):
        text = md.read_text()
        assert "```bash\npython -m vtlab backbone=splade-tiny vocab=native apc=off\n```" in text and densifies in text
    assert "keep apc=off" in stdout
    # the ranking's "start of fine-tuning" is the state the verdict keeps: as built, not after p60
    ranked = next(e for e in report["ranking"] if e["label"] == "splade-tiny · native")
    assert f"mean cosine between documents (start of fine-tuning) ({before['mean_pairwise_cosine']:.3f})" in "; ".join(
        ranked["reasons"]
    )
    # the random-init tiny-modernbert starts dense (nearly every logit > 0): there p60 moves it toward sparse
    other = next(s for s in report["suggestions"] if s["label"] == "tiny-modernbert · native")
    assert other["sparsity"]["start"] == "dense" and other["sparsity"]["apc_accepted"] is True
    assert other["args"]["apc"] == "p60"


@pytest.mark.cli
def test_random_init_backbone_is_marked_and_never_ranked_best(apc_sweep, tmp_path):
    """tiny-modernbert has random-init weights: marked in its result and the report, ranked after SPLADE-tiny though
    its mean rank is better (its tokenizer fits MODERN better), never the best of the multirun's comparison."""
    sweep, stdout = apc_sweep
    report = json.loads((sweep / "diagnose" / "report.json").read_text())
    assert [e["label"] for e in report["ranking"]] == ["splade-tiny · native", "tiny-modernbert · native"]
    jobs = [json.loads((sweep / j / "diagnose" / "diagnose.json").read_text())["candidate"] for j in ("0", "1")]
    assert [(c["backbone"], c["random_init"]) for c in jobs] == [("splade-tiny", False), ("tiny-modernbert", True)]
    assert "random-init weights" in stdout
    ranking = {e["label"]: e for e in report["ranking"]}
    tiny, splade = ranking["tiny-modernbert · native"], ranking["splade-tiny · native"]
    assert tiny["score"] < splade["score"]  # better on the criteria ...
    assert (splade["place"], tiny["place"], tiny["random_init"]) == (1, 2, True)  # ... yet last
    assert report["best"] == "splade-tiny · native" == report["suggestion"]["label"]
    assert tiny["reasons"][0] == "random-init weights: ranked last"
    md = (sweep / "diagnose" / "report.md").read_text()
    assert "Best: **splade-tiny · native**" in md
    assert "| tiny-modernbert | **random-init** |" in md and "| splade-tiny | pretrained |" in md
    assert "- tiny-modernbert · native (random-init): `python -m vtlab backbone=tiny-modernbert" in md
    # re-rendered from the job outputs: the same; with only the random-init job, no best at all
    assert diagnose_main([str(sweep), "--out", str(tmp_path / "all")]) == 0
    assert json.loads((tmp_path / "all" / "report.json").read_text())["best"] == "splade-tiny · native"
    assert diagnose_main([str(sweep / "1"), "--out", str(tmp_path / "alone")]) == 0
    alone = json.loads((tmp_path / "alone" / "report.json").read_text())
    assert alone["best"] is None and alone["suggestion"]["random_init"] is True
    assert "Best: none (every candidate has random-init weights)" in (tmp_path / "alone" / "report.md").read_text()


def test_dead_start_is_not_suggested_an_apc_that_makes_it_dense():
    """SPLADE-tiny with its output bias lowered until no term is active is dead; p60 would turn it dense (40% of all
    (doc, term) max-logits > 0): not suggested, apc=off with the reason."""
    encoder = SpladeEncoder.from_backbone(Backbone("asset:splade-tiny"), doc_max_length=48)
    with torch.no_grad():
        encoder.output_bias("doc").sub_(100.0)
    act = output_activity(encoder, PROBE_TEXTS, APC(percentile=60, num_docs=8, max_length=48, batch_size=4))
    assert act["before"]["mean_active_per_doc"] == 0.0 and act["after"]["mean_active_per_doc"] > 10_000
    effect = apc_effect(act, "p60", {"dead_below": 1.0, "dense_above": 0.05, "max_active_per_doc": 1000})
    assert (effect.start, effect.accepted) == (Place.DEAD, False)
    result = {**_result("splade-tiny", 1.3, 0.04, 0.97, 0.0, 0.02, apc="p60"), "activity": act}
    s = suggest(result)
    assert s["args"]["apc"] == "off"
    assert s["why"][-1].startswith("apc=off: a dead start (0.0 active dims per document as built")
    assert "no closer to the range or dense: not suggested" in s["why"][-1]
