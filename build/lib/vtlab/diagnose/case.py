"""Does a model handle case as a cased model does? The testbed's check that its cased-BPE model is really cased.

A cased vocabulary holds case variants: entries with the same word-initial marker whose text differs only in case
("Ġthe", "ĠThe", "ĠTHE"). Two figures:
- `row_cosine`: the mean cosine between the output row of a word-initial lowercase entry ("Ġthe") and its case
  variants ("ĠThe", "ĠTHE"), over the groups that have one. An uncased model has no such groups; FVT from an uncased
  model starts them as exact copies (cosine 1: the uncased tokenizer reads "The" as "the"); a cased model learns to
  keep them apart.
- `doc_mass_on_variants`: of the documents' SPLADE term mass (max over positions of log(1 + ReLU(logits))), the share
  that sits on a case variant other than the group's heaviest one: the mass a normalized vocabulary would merge.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from vtlab.vocab.canonical import WORD_START, canonical_vocab


def case_groups(tokenizer: PreTrainedTokenizerBase) -> list[tuple[bool, list[int]]]:
    """(lowercase-led word-initial group?, ids) of entries that differ only in case (same word-initial marker), groups
    of ≥ 2, the all-lowercase spelling first when the vocabulary has it ("Ġthe", "ĠThe", "ĠTHE" → True)."""
    groups: dict[tuple[bool, str], list[tuple[str, int]]] = defaultdict(list)
    for i, form in canonical_vocab(tokenizer).items():
        text = form.removeprefix(WORD_START)  # no NFKC: "ᵃ" is no case variant of "a"
        if any(c.lower() != c.upper() for c in text):  # only entries with a cased letter can have case variants
            groups[(form.startswith(WORD_START), text.lower())].append((text, i))
    out = []
    for (initial, folded), members in groups.items():
        if len(members) > 1:
            members.sort(key=lambda m: (m[0] != folded, m[0]))
            out.append((initial and members[0][0] == folded, [i for _, i in members]))
    return out


def _row_cosine(rows: torch.Tensor, groups: Sequence[Sequence[int]]) -> float | None:
    if not groups:
        return None
    unit = torch.nn.functional.normalize(rows.float(), dim=1)
    sims = [float((unit[g[1:]] @ unit[g[0]]).mean()) for g in groups]
    return sum(sims) / len(sims)


@torch.no_grad()
def document_terms(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    max_length: int = 128,
    batch_size: int = 16,
) -> torch.Tensor:
    """(docs, vocab) SPLADE weights of the raw MLM head: max over real positions of log(1 + ReLU(logits))."""
    model.eval()
    out = []
    for start in range(0, len(texts), batch_size):
        enc = tokenizer(
            list(texts[start : start + batch_size]),
            truncation=True,
            max_length=max_length,
            padding=True,
            return_tensors="pt",
        )
        logits = model(**enc).logits
        logits = logits.masked_fill(enc["attention_mask"].unsqueeze(-1) == 0, float("-inf"))
        out.append(torch.log1p(torch.relu(logits.max(dim=1).values)))
    return torch.cat(out)


def case_handling(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int = 128
) -> dict[str, Any]:
    """{"case_groups", "row_cosine", "row_cosine_groups", "doc_mass_on_variants", "examples"} for `model` on `texts`."""
    groups = case_groups(tokenizer)
    ids = [g for _, g in groups]
    lowercase_led = [g for led, g in groups if led]
    rows = model.get_output_embeddings().weight.detach()
    weights = document_terms(model, tokenizer, texts, max_length=max_length)
    total = float(weights.sum())
    spread = 0.0
    for g in ids:
        mass = weights[:, g]  # (docs, variants)
        spread += float((mass.sum(dim=1) - mass.max(dim=1).values).sum())
    examples = [tokenizer.convert_ids_to_tokens(g) for g in sorted(lowercase_led, key=len, reverse=True)[:3]]
    return {
        "case_groups": len(groups),
        "row_cosine": _row_cosine(rows, lowercase_led),
        "row_cosine_groups": len(lowercase_led),
        "doc_mass_on_variants": spread / total if total > 0 else 0.0,
        "docs": len(texts),
        "examples": examples,
    }
