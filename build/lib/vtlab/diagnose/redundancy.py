"""Vocabulary redundancy (the "Vocabulary Gap"): entries that are one word in different surface forms.

Each non-special entry's canonical form (vtlab.vocab.canonical: WordPiece "##x" → "x", "x" → "▁x", byte-level "Ġx" →
"▁x", SentencePiece as is) is normalized like `fuzzy_key` (word-initial marker and surrounding whitespace stripped,
case-folded) plus NFKC. A cased byte-level BPE has "the", "The", "Ġthe", "ĠThe", "THE", "ĠTHE" → one form "the":
six output dimensions a SPLADE model must learn to use as one. Entries without a normalized form (fragments of a
character, bare whitespace) stay their own dimension.

- vocab: entries, normalized forms, forms with > 1 surface form, entries merged by dropping the marker (+ NFKC) and
  by case-folding, surface forms per form, effective output dimensionality (normalized forms + unnormalizable);
- corpus: of the corpus's tokens, the share NOT on their normalized form's most used entry (spread_mass_share: the
  term mass spread away from one dimension, what merging the surface forms would move), and the share in normalized
  forms the corpus writes with ≥ 2 different entries at all (split_mass_share; one stray "##the" next to 1,000
  "the" already counts them all).
"""

from __future__ import annotations

import unicodedata
from collections import Counter, defaultdict
from typing import Any

import numpy as np
from transformers import PreTrainedTokenizerBase

from vtlab.vocab.canonical import BYTES_MARK, WORD_START, canonical_vocab

SURFACE_BUCKETS = ("1", "2", "3", "4", "5+")


def marker_form(form: str) -> str:
    """A canonical form without word-initial marker / surrounding whitespace, NFKC; '' for fragments and whitespace."""
    if form.startswith(BYTES_MARK):
        return ""
    return unicodedata.normalize("NFKC", form.removeprefix(WORD_START)).strip()


def normalized_form(form: str) -> str:
    """`marker_form`, case-folded (and NFKC again: case-folding can leave non-NFKC text). Coarser than marker_form:
    entries with one marker form always share the normalized form."""
    return unicodedata.normalize("NFKC", marker_form(form).casefold())


def _share(num: float, den: float) -> float:
    return float(num) / float(den) if den else 0.0


def vocabulary_redundancy(
    tokenizer: PreTrainedTokenizerBase, forms: dict[int, str] | None = None, n_examples: int = 5
) -> dict[str, Any]:
    """Figures over the vocabulary alone (no corpus); `forms`: canonical_vocab(tokenizer) if already computed."""
    forms = canonical_vocab(tokenizer) if forms is None else forms
    groups: dict[str, list[int]] = defaultdict(list)
    marker: set[str] = set()
    unnormalizable = 0
    for i in sorted(forms):
        key = normalized_form(forms[i])
        if not key:
            unnormalizable += 1
            continue
        groups[key].append(i)
        marker.add(marker_form(forms[i]))
    sizes = np.asarray([len(v) for v in groups.values()], dtype=np.int64)
    normalizable = int(sizes.sum())
    collapsing = sizes > 1
    largest = sorted(groups.items(), key=lambda kv: -len(kv[1]))[:n_examples]
    return {
        "entries": len(forms),
        "unnormalizable": unnormalizable,
        "marker_forms": len(marker),
        "normalized_forms": len(groups),
        "collapsing_forms": int(collapsing.sum()),
        "entries_in_collapsing_forms": int(sizes[collapsing].sum()),
        "merged_by_marker": normalizable - len(marker),  # also NFKC variants (ℓ → l)
        "merged_by_case": len(marker) - len(groups),
        "mean_surface_forms": _share(normalizable, len(groups)),
        "max_surface_forms": int(sizes.max()) if sizes.size else 0,
        "surface_forms_hist": dict(zip(SURFACE_BUCKETS, np.bincount(np.minimum(sizes, 5), minlength=6)[1:].tolist())),
        "effective_dims": len(groups) + unnormalizable,
        "effective_ratio": _share(len(groups) + unnormalizable, len(forms)),
        "largest_forms": [{"form": k, "tokens": tokenizer.convert_ids_to_tokens(v)} for k, v in largest],
    }


def corpus_redundancy(
    tokenizer: PreTrainedTokenizerBase, ids: np.ndarray, forms: dict[int, str] | None = None, n_examples: int = 10
) -> dict[str, Any]:
    """Figures over the corpus's tokens `ids` (all tokens count in the denominators, special ones included)."""
    forms = canonical_vocab(tokenizer) if forms is None else forms
    counts = Counter(ids.tolist())
    by_form: dict[str, dict[int, int]] = defaultdict(dict)
    unnormalizable_used = 0
    for i, n in counts.items():
        key = normalized_form(forms[i]) if i in forms else ""
        if key:
            by_form[key][i] = n
        else:
            unnormalizable_used += 1
    total = int(ids.size)
    split = {k: v for k, v in by_form.items() if len(v) > 1}
    split_mass = sum(sum(v.values()) for v in split.values())
    spread = {k: sum(v.values()) - max(v.values()) for k, v in split.items()}
    examples = sorted(split.items(), key=lambda kv: -spread[kv[0]])[:n_examples]
    return {
        "tokens": total,
        "entries_used": len(counts),
        "forms_used": len(by_form) + unnormalizable_used,
        "split_forms": len(split),
        "spread_mass_share": _share(sum(spread.values()), total),
        "split_mass_share": _share(split_mass, total),
        "split_examples": [  # the forms with the most tokens off their main entry
            {
                "form": k,
                "count": sum(v.values()),
                "spread": spread[k],
                "surfaces": [
                    [tokenizer.convert_ids_to_tokens(i), n] for i, n in sorted(v.items(), key=lambda x: -x[1])
                ],
            }
            for k, v in examples
        ],
    }


def redundancy(tokenizer: PreTrainedTokenizerBase, ids: np.ndarray) -> dict[str, Any]:
    """{"vocab": vocabulary_redundancy, "corpus": corpus_redundancy}, sharing one canonical_vocab pass."""
    forms = canonical_vocab(tokenizer)
    return {"vocab": vocabulary_redundancy(tokenizer, forms), "corpus": corpus_redundancy(tokenizer, ids, forms)}
