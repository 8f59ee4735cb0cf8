"""A least-squares start for a new MLM head: the prediction transform's dense layer is fitted so that, at every real
position of a text sample, the head's input (the encoder's last hidden state) maps onto the unit output row of the
token at that position. A head made for an encoder trained without one (an embedding model such as e5, MiniLM) then
starts by predicting each position's own token and its neighbours in the output space, instead of one random
projection for all, and the masked-LM steps that follow refine it.

The fit is ridge regression with an intercept: W = argmin ‖[H 1] W − T‖² + λ‖W‖², T = `scale` × the unit decoder
rows of the positions' tokens, λ = `ridge` × the mean diagonal of HᵀH. It reads only the texts it is given (the MLM
corpus), never the decoder rows' values beyond their directions, and changes nothing but the dense layer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import torch
from torch import Tensor, nn

from vtlab.backbones import decoder_bypassed
from vtlab.core.errors import VtlabError

log = logging.getLogger("vtlab")

# the hidden → hidden dense layer that opens each family's MLM prediction head
HEAD_DENSE = ("predictions.transform.dense", "lm_head.dense", "head.dense")


def head_dense(model: nn.Module) -> nn.Linear:
    """The dense layer at the start of `model`'s MLM head (BERT, RoBERTa, ModernBERT)."""
    for name, module in model.named_modules():
        if name.endswith(HEAD_DENSE) and isinstance(module, nn.Linear) and module.in_features == module.out_features:
            return module
    raise VtlabError(f"mlm.head_fit: {type(model).__name__} has no MLM head transform ({' / '.join(HEAD_DENSE)})")


@torch.no_grad()
def head_inputs(model: nn.Module, batches: Iterable[dict[str, Tensor]], special_ids: Tensor) -> tuple[Tensor, Tensor]:
    """(the head's inputs at every real, non-special position, the token ids there), over `batches` of
    {input_ids, attention_mask}; the vocabulary-sized decoder is bypassed."""
    dense = head_dense(model)
    seen: list[Tensor] = []
    handle = dense.register_forward_pre_hook(lambda _module, args: seen.append(args[0].detach()))
    hidden, tokens = [], []
    was_training = model.training
    model.eval()
    try:
        with decoder_bypassed(model):
            for batch in batches:
                seen.clear()
                model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
                keep = batch["attention_mask"].bool() & ~torch.isin(batch["input_ids"], special_ids)
                hidden.append(seen[-1][keep].float())
                tokens.append(batch["input_ids"][keep])
    finally:
        handle.remove()
        model.train(was_training)
    return torch.cat(hidden), torch.cat(tokens)


@torch.no_grad()
def fit_head(
    model: nn.Module, hidden: Tensor, tokens: Tensor, ridge: float = 1e-2, scale: float = 5.0
) -> dict[str, float]:
    """Set the head's dense layer to the ridge solution mapping `hidden` onto `scale` × the unit output rows of
    `tokens`; returns what it did."""
    if hidden.shape[0] < hidden.shape[1] + 1:
        raise VtlabError(
            f"mlm.head_fit: {hidden.shape[0]} positions cannot determine a {hidden.shape[1]}-wide head: expected more "
            "texts (mlm.head_fit.docs)"
        )
    decoder = model.get_output_embeddings()
    rows = decoder.weight.detach().float()
    unit = rows / rows.norm(dim=1, keepdim=True).clamp_min(1e-12)
    x = torch.cat([hidden, torch.ones(len(hidden), 1)], dim=1).double()
    gram = x.T @ x
    lam = float(ridge) * float(torch.diagonal(gram)[:-1].mean())
    gram += lam * torch.eye(gram.shape[0], dtype=gram.dtype)
    w = torch.linalg.solve(gram, x.T @ (scale * unit[tokens]).double()).float()
    dense = head_dense(model)
    dense.weight.copy_(w[:-1].T.to(dense.weight.dtype))
    dense.bias.copy_(w[-1].to(dense.bias.dtype))
    return {"positions": int(len(tokens)), "ridge": float(ridge), "scale": float(scale)}


def span_batches(ids: Tensor, lengths: Tensor, batch_size: int = 32) -> Iterable[dict[str, Tensor]]:
    """{input_ids, attention_mask} batches of packed spans (`ids` right-padded, `lengths` their real lengths)."""
    mask = (torch.arange(ids.shape[1])[None, :] < lengths[:, None]).long()
    for i in range(0, len(ids), batch_size):
        yield {"input_ids": ids[i : i + batch_size], "attention_mask": mask[i : i + batch_size]}


def batch_rows(batch: dict[str, Tensor]) -> int:
    """How many spans a batch of span_batches holds (what a progress counts)."""
    return len(batch["input_ids"])
