"""A model's weights by content: the same weights give the same key, wherever they are loaded from; and an encoder's
way of reading text, as cache-key parts (its weights among them)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

from vtlab.core.atomic import stable_hash
from vtlab.core.cache_keys import tokenizer_key


def _weight_bytes(networks: Iterable[nn.Module]) -> Iterator[bytes | object]:
    for i, net in enumerate(networks):
        for name, t in net.state_dict().items():
            yield f"{i}.{name}".encode()
            yield t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()


def weights_key(networks: Iterable[nn.Module], length: int = 40) -> str:
    """A digest of every weight of `networks` (their names, order and bytes)."""
    return stable_hash(_weight_bytes(networks), length)  # type: ignore[arg-type]


def reading_settings(encoder: Any) -> dict[str, Any]:
    """How `encoder` (a vtlab.models.encoder.SpladeEncoder or alike) reads text, as cache-key parts
    (vtlab.core.cache_keys.settings_key): its class, lengths, tokenizer and input preprocessing, and a digest of every
    weight of its networks."""
    return {
        "encoder": type(encoder).__name__,
        "max_length": encoder.max_length,
        "tokenizer": tokenizer_key(encoder.tokenizer),
        "preprocess": encoder.preprocess,
        "weights": weights_key(encoder.networks()),
    }
