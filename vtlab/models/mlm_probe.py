"""What an MLM adaptation did, measured on text it never trained on: a held-out share of the MLM corpus (whole
documents, chosen by a hash of their text, so every arm holds out the same passages whatever its vocabulary or input)
and two numbers on it, before the first step (after the head fit) and after the last:

- **masked-LM loss**: the cross-entropy at the masked positions, masked with a fixed seed (the same positions for
  both measurements of one arm);
- **own-token top-1**: unmasked input, the share of real positions whose top output row is their own token (what the
  head fit starts from; a body the steps damaged loses it).

The rate rule of vtlab.reproduce (`mlm_rate` in conf/tables/<scale>.yaml) reads the loss after the steps: a choice
that sees no retrieval number."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from vtlab.backbones import decoder_bypassed
from vtlab.core.errors import VtlabError
from vtlab.core.progress import counted
from vtlab.models.head_fit import batch_rows, span_batches

HASH_BUCKETS = 2**32


def is_held_out(text: str, share: float, seed: int = 0) -> bool:
    """Whether a document belongs to the held-out share: a hash of (seed, text) below `share` of its range. The same
    text is held out for every arm, tokenizer and corpus order."""
    digest = hashlib.blake2b(f"{seed}\x00{text}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") < share * HASH_BUCKETS


def split_held_out(texts: Iterable[str], share: float, seed: int = 0) -> tuple[list[str], list[str]]:
    """(training documents, held-out documents) of a corpus; `share` in [0, 1)."""
    if not 0.0 <= float(share) < 1.0:
        raise VtlabError(f"mlm.held_out.share={share!r}: expected a share in [0, 1)")
    train, held = [], []
    for text in texts:
        (held if is_held_out(text, share, seed) else train).append(text)
    return train, held


def _mask(ids: Tensor, real: Tensor, special: Tensor, probability: float, seed: int, mask_id: int) -> Tensor:
    """The input with a seeded `probability` of its real, non-special positions replaced by the mask token."""
    g = torch.Generator().manual_seed(seed)
    chosen = (torch.rand(ids.shape, generator=g) < probability) & real & ~torch.isin(ids, special)
    return torch.where(chosen, torch.full_like(ids, mask_id), ids), chosen


@torch.no_grad()
def probe(
    model: nn.Module,
    spans: np.ndarray,
    lengths: np.ndarray,
    special_ids: Sequence[int],
    mask_id: int,
    probability: float = 0.3,
    seed: int = 0,
    batch_size: int = 32,
) -> dict[str, Any]:
    """{loss, own_top1, positions, masked, spans} of `model` (an HF masked LM) over packed `spans`."""
    if len(lengths) == 0:
        raise VtlabError("mlm.held_out: no held-out span to probe (raise mlm.held_out.share)")
    special = torch.tensor(sorted(special_ids))
    decoder = model.get_output_embeddings()
    ids_all = torch.from_numpy(spans.astype("int64"))
    lens = torch.from_numpy(np.asarray(lengths))
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    loss_sum, masked, own, real_n = 0.0, 0, 0, 0
    try:
        batches = counted(
            span_batches(ids_all, lens, batch_size), len(lens), "spans", "mlm.held_out: probing", size=batch_rows
        )
        for i, batch in enumerate(batches):
            ids, attn = batch["input_ids"].to(device), batch["attention_mask"].to(device)
            special = special.to(device)
            real = attn.bool() & ~torch.isin(ids, special)
            with decoder_bypassed(model):
                hidden = model(input_ids=ids, attention_mask=attn).logits
                top = nn.functional.linear(hidden[real], decoder.weight, decoder.bias).argmax(-1)
                own += int((top == ids[real]).sum())
                real_n += int(real.sum())
                inputs, chosen = _mask(ids.cpu(), attn.bool().cpu(), special.cpu(), probability, seed + i, mask_id)
                inputs, chosen = inputs.to(device), chosen.to(device)
                hidden = model(input_ids=inputs, attention_mask=attn).logits
            logits = nn.functional.linear(hidden[chosen], decoder.weight, decoder.bias).float()
            loss_sum += float(nn.functional.cross_entropy(logits, ids[chosen], reduction="sum"))
            masked += int(chosen.sum())
    finally:
        model.train(was_training)
    return {
        "loss": loss_sum / max(masked, 1),
        "own_top1": own / max(real_n, 1),
        "positions": real_n,
        "masked": masked,
        "spans": int(len(lengths)),
    }
