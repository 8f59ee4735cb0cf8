"""SPLADE's term weight from a raw logit: log1p(relu(z)), optionally the ℓ0-approximating log1p of that."""

from __future__ import annotations

import torch
from torch import Tensor


def splade_activation(z: Tensor, double_log: bool = False) -> Tensor:
    """log1p(relu(z)); `double_log` adds the second log1p of the ℓ0-approximating activation (OpenSearch `use_l0`)."""
    w = torch.log1p(torch.relu(z))
    return torch.log1p(w) if double_log else w
