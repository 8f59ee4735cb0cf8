"""Vocabulary overlap between a source tokenizer and a target tokenizer (the first step of Vocabulary Transfer).

Tokens of different tokenizer families are compared through a *canonical form* (the idea FOCUS uses): the text a
token stands for, with "▁" in front when the token starts a word. So WordPiece "apple", byte-level "Ġapple" and
SentencePiece "▁apple" are all "▁apple"; WordPiece "##ing", byte-level "ing" and SentencePiece "ing" are all "ing".
A target row whose canonical form equals a source row's copies that row's embedding; the rest are new tokens.
A punctuation-only token (every character Unicode punctuation or symbol) with no equal form copies the source row of
the same text with either word marker: WordPiece's standalone "," ("▁,") takes SentencePiece's attached ",".
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np
from transformers import PreTrainedTokenizerBase

from vtlab.core.errors import VtlabError

TokenizerKind = Literal["wordpiece", "bytelevel", "sentencepiece"]
KINDS: tuple[str, ...] = ("wordpiece", "bytelevel", "sentencepiece")

WORD_START = "▁"  # U+2581, SentencePiece's space symbol, used as the word-initial marker of canonical forms
# Prefix of the canonical form of a token whose bytes are not valid UTF-8 on their own (a piece of a multi-byte
# character). U+FFFE is a Unicode noncharacter: no real token text contains it, so such forms never match text.
BYTES_MARK = "\ufffe"
_SP_BYTE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece byte-fallback tokens, e.g. "<0x0A>"


# -- byte-level alphabet -----------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _byte_alphabet() -> dict[str, int]:
    """GPT-2's printable stand-in character → the byte it encodes.

    Bytes that are printable Latin-1 characters stand for themselves; the other 68 (controls, space, soft hyphen…)
    are given the characters U+0100, U+0101, … in byte order. That is why a space shows as "Ġ" and "\\n" as "Ċ".
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def bytelevel_bytes(token: str) -> bytes | None:
    """The raw bytes a byte-level BPE token stands for; None if it uses characters outside the GPT-2 alphabet."""
    table = _byte_alphabet()
    try:
        return bytes(table[c] for c in token)
    except KeyError:
        return None


# -- canonical forms ---------------------------------------------------------------------------------------------------
def _form(text: str) -> str:
    # One rule for every family once the token is decoded to text: a leading space marks a word start.
    return WORD_START + text[1:] if text.startswith(" ") else text


def _bytes_form(raw: bytes) -> str:
    try:
        return _form(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return BYTES_MARK + raw.hex()


def canonical_form(token: str, kind: str) -> str:
    """Family-independent form of a (non-special) vocabulary entry: "▁" + text if word-initial, else text.

    - wordpiece: "##ing" → "ing"; "apple" → "▁apple" ("##" alone is the word "##").
    - bytelevel: decoded from the GPT-2 byte alphabet first. "Ġapple" → "▁apple", "apple" → "apple", "Ċ" → "\\n",
      "âĢĻ" → "’". "Ġ" (a lone space) → "▁", the bare word boundary, which equals SentencePiece's "▁" token.
      A token whose bytes are not valid UTF-8 alone ("âĢ") → BYTES_MARK + hex bytes, which never equals text.
    - sentencepiece: "▁" is a space, so "▁apple" → "▁apple", "apple" → "apple", "▁▁" → "▁ " (like "ĠĠ");
      byte-fallback tokens "<0xE2>" are byte strings like the byte-level ones.
    """
    if kind == "wordpiece":
        return token[2:] if token.startswith("##") and len(token) > 2 else WORD_START + token
    if kind == "bytelevel":
        raw = bytelevel_bytes(token)
        # Characters outside the byte alphabet: not a byte-level entry after all; keep its literal text.
        return _form(token) if raw is None else _bytes_form(raw)
    if kind == "sentencepiece":
        byte = _SP_BYTE.fullmatch(token)
        if byte:
            return _bytes_form(bytes.fromhex(byte.group(1)))
        return _form(token.replace(WORD_START, " "))
    raise ValueError(f"unknown tokenizer kind {kind!r}; expected one of {', '.join(KINDS)}")


def added_token_form(content: str) -> str:
    """Canonical form of a non-special added token: its literal text, split off the input before pre-tokenization,
    so it behaves as a whole word ("[unused0]" → "▁[unused0]", matching WordPiece's "[unused0]").
    Whitespace-only added tokens (OLMo's runs of spaces) keep their text."""
    stripped = content.strip()
    return WORD_START + stripped if stripped else content


def punct_key(form: str) -> str:
    """What the punctuation rule compares: the canonical form without word-initial marker or surrounding whitespace,
    when that is non-empty and every character is Unicode punctuation or symbol (categories P*, S*); else empty (words,
    whitespace, byte strings)."""
    if form.startswith(BYTES_MARK):
        return ""
    bare = form.removeprefix(WORD_START).strip()
    return bare if bare and all(unicodedata.category(c)[0] in "PS" for c in bare) else ""


def fuzzy_key(form: str) -> str:
    """What fuzzy matching compares: the canonical form without word-initial marker or surrounding whitespace,
    case-folded. Empty for byte strings and whitespace, which never fuzzy-match."""
    if form.startswith(BYTES_MARK):
        return ""
    return form.removeprefix(WORD_START).strip().casefold()


# -- tokenizer inspection ----------------------------------------------------------------------------------------------
def _types(node: Any) -> Iterator[str]:
    """Every "type" value in a (nested) tokenizer.json component: Sequence pre-tokenizers/decoders nest."""
    if isinstance(node, dict):
        if isinstance(node.get("type"), str):
            yield node["type"]
        for value in node.values():
            yield from _types(value)
    elif isinstance(node, list):
        for value in node:
            yield from _types(value)


def tokenizer_kind(tokenizer: PreTrainedTokenizerBase) -> TokenizerKind:
    """Which canonical-form rules apply to this tokenizer's vocabulary, from its backend (tokenizer.json)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        if hasattr(tokenizer, "sp_model"):  # a slow SentencePiece tokenizer
            return "sentencepiece"
        raise VtlabError(f"{type(tokenizer).__name__}: not a fast tokenizer; cannot tell its vocabulary format")
    spec = json.loads(backend.to_str())
    model = spec.get("model") or {}
    if model.get("type") == "WordPiece":
        prefix = model.get("continuing_subword_prefix", "##")
        if prefix != "##":
            raise VtlabError(f"WordPiece tokenizer with continuing prefix {prefix!r}; only '##' is supported")
        return "wordpiece"
    around = [*_types(spec.get("pre_tokenizer")), *_types(spec.get("decoder")), *_types(spec.get("normalizer"))]
    if "ByteLevel" in around:
        return "bytelevel"
    # Metaspace: the usual SentencePiece conversion; Llama-style BPE instead replaces " " by "▁" in the normalizer.
    if (
        "Metaspace" in around
        or model.get("type") == "Unigram"
        or WORD_START in json.dumps(spec.get("normalizer"), ensure_ascii=False)
    ):
        return "sentencepiece"
    raise VtlabError(
        f"{type(tokenizer).__name__}: unrecognised vocabulary format (model {model.get('type')}, components "
        f"{sorted(set(around))}); expected WordPiece '##', byte-level BPE 'Ġ' or SentencePiece '▁'"
    )


def special_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """Ids of special tokens: the named ones plus every added token flagged special (e.g. OLMo's <|endoftext|>)."""
    ids = {int(i) for i in tokenizer.all_special_ids}
    ids |= {int(i) for i, tok in tokenizer.added_tokens_decoder.items() if tok.special}
    return ids


def canonical_vocab(tokenizer: PreTrainedTokenizerBase) -> dict[int, str]:
    """id → canonical form for every non-special id below len(tokenizer), added tokens included."""
    kind = tokenizer_kind(tokenizer)
    size = len(tokenizer)
    specials = special_ids(tokenizer)
    added = {int(i): tok.content for i, tok in tokenizer.added_tokens_decoder.items()}
    forms: dict[int, str] = {}
    for token, i in tokenizer.get_vocab().items():
        if i >= size or i in specials:
            continue
        # Added tokens are stored as raw text (not in the model's alphabet), so they get their own rule.
        forms[i] = added_token_form(added[i]) if i in added else canonical_form(token, kind)
    return forms


_ROLES: dict[str, tuple[str, ...]] = {
    "cls": ("cls_token_id", "bos_token_id"),  # RoBERTa-style models use <s> as both
    "sep": ("sep_token_id", "eos_token_id"),
    "pad": ("pad_token_id",),
    "mask": ("mask_token_id",),
    "unk": ("unk_token_id",),
}


def _role_id(tokenizer: PreTrainedTokenizerBase, attrs: tuple[str, ...]) -> int | None:
    for attr in attrs:
        value = getattr(tokenizer, attr, None)
        if isinstance(value, int) and 0 <= value < len(tokenizer):
            return value
    return None


def special_token_pairs(source_tok: PreTrainedTokenizerBase, target_tok: PreTrainedTokenizerBase) -> dict[int, int]:
    """target special id → source special id, paired by role (cls/bos, sep/eos, pad, mask, unk), not by text."""
    pairs: dict[int, int] = {}
    for attrs in _ROLES.values():
        t, s = _role_id(target_tok, attrs), _role_id(source_tok, attrs)
        if t is not None and s is not None and t not in pairs:  # first role wins when one token plays two
            pairs[t] = s
    return pairs


# -- overlap -----------------------------------------------------------------------------------------------------------
@dataclass
class Overlap:
    """Target rows that can copy a source row: target_ids[k] ← source_ids[k] (sorted by target id)."""

    target_ids: np.ndarray  # int64
    source_ids: np.ndarray  # int64
    n_exact: int
    n_fuzzy: int
    n_special: int
    source_size: int
    target_size: int
    n_punct: int = 0  # punctuation-only tokens matched across word markers ("▁," ← ",")

    @property
    def n_matched(self) -> int:
        return int(self.target_ids.size)

    @property
    def new_target_ids(self) -> np.ndarray:
        """Target ids with no source row (they need Semantic Initialization or another init), ascending."""
        covered = np.zeros(self.target_size, dtype=bool)
        covered[self.target_ids] = True
        return np.flatnonzero(~covered).astype(np.int64)

    def report(self) -> dict[str, int | float]:
        return {
            "source_size": self.source_size,
            "target_size": self.target_size,
            "n_special": self.n_special,
            "n_exact": self.n_exact,
            "n_punct": self.n_punct,
            "n_fuzzy": self.n_fuzzy,
            "n_matched": self.n_matched,
            "n_new": self.target_size - self.n_matched,
            "coverage": self.n_matched / self.target_size if self.target_size else 0.0,
        }


def _first_by_form(forms: dict[int, str]) -> dict[str, int]:
    """canonical form → lowest id with that form (several source ids can share one, e.g. an added duplicate)."""
    index: dict[str, int] = {}
    for i in sorted(forms):
        index.setdefault(forms[i], i)
    return index


def _punct_pick(target_form: str, candidates: list[tuple[int, str]]) -> int:
    """Deterministic choice among source (id, form) sharing the target's punctuation key: the same word marker as the
    target first, then the other marker, then the lowest id."""
    initial = target_form.startswith(WORD_START)
    return min(candidates, key=lambda item: (item[1].startswith(WORD_START) != initial, item[0]))[0]


def _fuzzy_pick(target_form: str, candidates: list[tuple[int, str]]) -> int:
    """Deterministic choice among source (id, form) sharing the target's fuzzy key: same case first, then the same
    word position as the target (word-initial for the usual word-initial target), then the lowest id."""
    bare = target_form.removeprefix(WORD_START).strip()
    initial = target_form.startswith(WORD_START)

    def rank(item: tuple[int, str]) -> tuple[bool, bool, int]:
        i, form = item
        return form.removeprefix(WORD_START).strip() != bare, form.startswith(WORD_START) != initial, i

    return min(candidates, key=rank)[0]


def match_vocabularies(
    source_tok: PreTrainedTokenizerBase, target_tok: PreTrainedTokenizerBase, fuzzy: bool = False
) -> Overlap:
    """Which target rows copy which source row: specials by role, then equal canonical forms, then punctuation-only
    forms with the same text whatever their word marker (always), then (fuzzy) the same form up to case and
    word-initial marker. Each target id appears at most once; source rows may be reused."""
    pairs = special_token_pairs(source_tok, target_tok)
    n_special = len(pairs)
    source_forms, target_forms = canonical_vocab(source_tok), canonical_vocab(target_tok)
    by_form = _first_by_form(source_forms)

    n_exact = 0
    for t in sorted(target_forms):
        s = by_form.get(target_forms[t])
        if t not in pairs and s is not None:
            pairs[t] = s
            n_exact += 1

    by_punct: dict[str, list[tuple[int, str]]] = {}
    for s, form in source_forms.items():
        if key := punct_key(form):
            by_punct.setdefault(key, []).append((s, form))
    n_punct = 0
    for t in sorted(target_forms):
        candidates = by_punct.get(punct_key(target_forms[t])) if t not in pairs else None
        if candidates:
            pairs[t] = _punct_pick(target_forms[t], candidates)
            n_punct += 1

    n_fuzzy = 0
    if fuzzy:
        by_key: dict[str, list[tuple[int, str]]] = {}
        for s, form in source_forms.items():
            key = fuzzy_key(form)
            if key:
                by_key.setdefault(key, []).append((s, form))
        for t in sorted(target_forms):
            candidates = by_key.get(fuzzy_key(target_forms[t])) if t not in pairs else None
            if candidates:
                pairs[t] = _fuzzy_pick(target_forms[t], candidates)
                n_fuzzy += 1

    order = sorted(pairs)
    return Overlap(
        target_ids=np.asarray(order, dtype=np.int64),
        source_ids=np.asarray([pairs[t] for t in order], dtype=np.int64),
        n_exact=n_exact,
        n_fuzzy=n_fuzzy,
        n_special=n_special,
        source_size=len(source_tok),
        target_size=len(target_tok),
        n_punct=n_punct,
    )
