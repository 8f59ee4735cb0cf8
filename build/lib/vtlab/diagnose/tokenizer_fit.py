"""Tokenizer fit: how many pieces the tokenizer cuts the corpus's words into, and how often it cannot express them.

Words are whitespace-separated strings of the (preprocessed) text; a word's *core* is the word without leading and
trailing punctuation/symbols ("(cat)." → "cat"), so attached punctuation does not count as splitting a word. Each
token is assigned to a word by its character offsets: to the word holding its first non-space character, and a token
made only of whitespace (byte-level "Ġ", OLMo's runs of spaces) to the word that follows it.

- fertility: tokens per whitespace word (all of a word's tokens, punctuation included);
- split3_share: share of words (with a core) whose core is cut into ≥ 3 tokens;
- unk_rate / byte_fallback_rate: share of tokens that are the unknown token / a fragment of a character (byte-level
  pieces of a multi-byte character, SentencePiece byte fallback: canonical forms marked BYTES_MARK);
- frequent_single_token_share: of the `top_words` most frequent cores, the share expressed as ONE known token (not
  unknown, not a byte fragment) in at least half of their occurrences;
- scripts: the same per Unicode script of the word's first letter (multilingual when ≥ 2 scripts each hold
  ≥ `min_script_share` of the words).
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import regex
from transformers import PreTrainedTokenizerBase

from vtlab.vocab.canonical import BYTES_MARK, canonical_vocab

_WORD = regex.compile(r"\S+")
# used with .match(text, start, end): anchored at the word start, `$` at the word end
_CORE = regex.compile(r"[\p{P}\p{S}]*(.*?)[\p{P}\p{S}]*$", regex.DOTALL)
PIECE_BUCKETS = ("0", "1", "2", "3", "4", "5+")
COMMON = "COMMON"  # words without a letter (numbers, symbols)


@dataclass
class TokenizedCorpus:
    """Every token of the corpus (no special tokens added), with the word it belongs to."""

    ids: np.ndarray  # int64 [T]
    word: np.ndarray  # int64 [T]: global word index, -1 for whitespace after the last word of a document
    in_core: np.ndarray  # bool [T]: the token's first non-space character lies in its word's core
    cores: list[str] = field(default_factory=list)  # per word
    scripts: list[str] = field(default_factory=list)  # per word
    n_docs: int = 0


@lru_cache(maxsize=65536)
def char_script(ch: str) -> str:
    """Unicode script of a letter, from its character name ("CYRILLIC SMALL LETTER A" → CYRILLIC, "CJK …" → CJK)."""
    name = unicodedata.name(ch, "")
    return name.split(" ", 1)[0] if name else "OTHER"


def word_script(word: str) -> str:
    """Script of the word's first letter; COMMON when it has none."""
    return next((char_script(c) for c in word if c.isalpha()), COMMON)


def _first_nonspace(text: str) -> np.ndarray:
    """[len+1]: for each position i, the first j ≥ i that is not whitespace (len(text) if none)."""
    n = len(text)
    space = np.fromiter((c.isspace() for c in text), dtype=bool, count=n)
    idx = np.where(space, n, np.arange(n))
    return np.append(np.minimum.accumulate(idx[::-1])[::-1], n) if n else np.array([0])


def _assign(text: str, offsets: np.ndarray, first_word: int) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """(word index per token, token-in-core per token, cores, scripts) for one document."""
    spans = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    cores, core_s, core_e, scripts = [], [], [], []
    for s, e in spans:
        m = _CORE.match(text, s, e)
        cores.append(m.group(1))
        core_s.append(m.start(1))
        core_e.append(m.end(1))
        scripts.append(word_script(m.group(1) or text[s:e]))
    # owner[i]: the word holding character i; whitespace belongs to the next word, trailing whitespace to none
    owner = np.full(len(text) + 1, -1, dtype=np.int64)
    if spans:
        ends = np.array([e for _, e in spans])
        lengths = np.diff(np.concatenate([[0], ends]))
        owner[: ends[-1]] = np.repeat(np.arange(len(spans)), lengths)
    if offsets.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, bool), cores, scripts
    start, end = offsets[:, 0], offsets[:, 1]
    first = _first_nonspace(text)[start]
    found = first < end
    local = owner[np.where(found, first, start)]
    cs, ce = np.asarray(core_s + [0]), np.asarray(core_e + [0])  # index -1 → the dummy entry
    in_core = found & (local >= 0) & (cs[local] <= first) & (first < ce[local])
    return np.where(local >= 0, local + first_word, -1), in_core, cores, scripts


def tokenize_corpus(
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    preprocess: Callable[[str], str] | None = None,
    batch_size: int = 256,
) -> TokenizedCorpus:
    """Tokenize whole documents (no truncation, no special tokens) and assign each token to its word."""
    texts = [preprocess(t) for t in texts] if preprocess is not None else list(texts)
    ids, words, in_core, cores, scripts = [], [], [], [], []
    for start in range(0, len(texts), batch_size):
        batch = texts[start : start + batch_size]
        enc = tokenizer(batch, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        for text, tok_ids, offs in zip(batch, enc["input_ids"], enc["offset_mapping"]):
            w, c, doc_cores, doc_scripts = _assign(text, np.asarray(offs, dtype=np.int64).reshape(-1, 2), len(cores))
            ids.append(np.asarray(tok_ids, dtype=np.int64))
            words.append(w)
            in_core.append(c)
            cores += doc_cores
            scripts += doc_scripts

    def cat(xs: list, dt: Any) -> np.ndarray:
        return np.concatenate(xs) if xs else np.zeros(0, dt)

    return TokenizedCorpus(cat(ids, np.int64), cat(words, np.int64), cat(in_core, bool), cores, scripts, len(texts))


def fragment_ids(tokenizer: PreTrainedTokenizerBase) -> np.ndarray:
    """bool [len(tokenizer)]: entries that stand for a fragment of a character (canonical form BYTES_MARK + hex)."""
    mask = np.zeros(len(tokenizer), dtype=bool)
    for i, form in canonical_vocab(tokenizer).items():
        mask[i] = form.startswith(BYTES_MARK)
    return mask


def _share(num: float, den: float) -> float:
    return float(num) / float(den) if den else 0.0


def _word_stats(
    pieces: np.ndarray, core_pieces: np.ndarray, has_core: np.ndarray, bad: np.ndarray, n_tokens: int
) -> dict[str, float]:
    return {
        "words": int(pieces.size),
        "fertility": _share(pieces.sum(), pieces.size),
        "split3_share": _share((core_pieces[has_core] >= 3).sum(), has_core.sum()),
        "unk_or_byte_rate": _share(bad, n_tokens),
    }


def tokenizer_fit(
    tokenizer: PreTrainedTokenizerBase,
    corpus: TokenizedCorpus,
    top_words: int = 1000,
    min_script_share: float = 0.01,
    n_examples: int = 10,
) -> dict[str, Any]:
    """The fit figures of `tokenizer` on an already tokenized corpus (see the module docstring)."""
    n_words, ids, word = len(corpus.cores), corpus.ids, corpus.word
    unk_id = tokenizer.unk_token_id
    unk = ids == unk_id if unk_id is not None else np.zeros(ids.size, bool)
    frag_table = fragment_ids(tokenizer)
    frag = frag_table[np.clip(ids, 0, len(frag_table) - 1)] & (ids < len(frag_table))
    bad = unk | frag
    assigned = word >= 0
    pieces = np.bincount(word[assigned], minlength=n_words)
    core_pieces = np.bincount(word[corpus.in_core], minlength=n_words)
    bad_core = np.bincount(word[corpus.in_core & bad], minlength=n_words)
    has_core = np.fromiter((bool(c) for c in corpus.cores), dtype=bool, count=n_words)
    hist = np.bincount(np.minimum(core_pieces[has_core], 5), minlength=6)

    # frequent words: one known token in at least half of their occurrences
    single = (core_pieces == 1) & (bad_core == 0)
    counts: Counter[str] = Counter()
    singles: Counter[str] = Counter()
    first_seen: dict[str, int] = {}
    for w, core in enumerate(corpus.cores):
        if core:
            counts[core] += 1
            singles[core] += int(single[w])
            first_seen.setdefault(core, w)
    top = counts.most_common(top_words)
    is_single = {core: 2 * singles[core] >= n for core, n in top}
    split_examples = []
    for core, n in top:
        if not is_single[core] and len(split_examples) < n_examples:
            w = first_seen[core]
            toks = tokenizer.convert_ids_to_tokens(ids[(word == w) & corpus.in_core].tolist())
            split_examples.append({"word": core, "count": n, "tokens": toks})

    # per script
    scripts = np.asarray(corpus.scripts, dtype=object) if n_words else np.zeros(0, object)
    by_script: dict[str, dict[str, float]] = {}
    token_script = scripts[word[assigned]] if n_words else np.zeros(0, object)
    for script, n in Counter(corpus.scripts).most_common():
        sel = scripts == script
        tok_sel = token_script == script
        stats = _word_stats(
            pieces[sel], core_pieces[sel], has_core[sel], int(bad[assigned][tok_sel].sum()), int(tok_sel.sum())
        )
        by_script[script] = {"word_share": _share(n, n_words), **stats}
    major = [s for s, v in by_script.items() if s != COMMON and v["word_share"] >= min_script_share]

    return {
        "docs": corpus.n_docs,
        "words": n_words,
        "tokens": int(ids.size),
        "unassigned_tokens": int((~assigned).sum()),
        "fertility": _share(pieces.sum(), n_words),
        "split3_share": _share((core_pieces[has_core] >= 3).sum(), has_core.sum()),
        "core_pieces_hist": dict(zip(PIECE_BUCKETS, hist.tolist())),
        "unk_rate": _share(unk.sum(), ids.size),
        "byte_fallback_rate": _share(frag.sum(), ids.size),
        "unk_or_byte_rate": _share(bad.sum(), ids.size),
        "top_words": len(top),
        "frequent_single_token_share": _share(sum(is_single.values()), len(top)),
        "frequent_split_examples": split_examples,
        "scripts": by_script,
        "multilingual": len(major) >= 2,
    }
