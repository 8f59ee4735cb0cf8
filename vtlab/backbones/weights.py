"""A model's weights by content: the same weights give the same key, wherever they are loaded from."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch import nn

from vtlab.core.atomic import stable_hash


def _weight_bytes(networks: Iterable[nn.Module]) -> Iterator[bytes | object]:
    for i, net in enumerate(networks):
        for name, t in net.state_dict().items():
            yield f"{i}.{name}".encode()
            yield t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()


def weights_key(networks: Iterable[nn.Module], length: int = 40) -> str:
    """A digest of every weight of `networks` (their names, order and bytes)."""
    return stable_hash(_weight_bytes(networks), length)  # type: ignore[arg-type]
