"""The network's body in row chunks: on CPU without autograd, a batch runs in chunks whose widest activation stays
within BODY_BYTES, below glibc's mmap threshold, so with vtlab.runtime.allocator's settings the same heap memory serves
every batch instead of fresh pages from the kernel (SPLADE-tiny at 64 × 256 tokens: a 32 MiB FFN activation). The
head then pools the whole batch (its weight streams from memory once per batch)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

BODY_BYTES = 16 * 2**20


def body_rows(config: Any, length: int, budget_bytes: int) -> int:
    """How many rows of `length` positions one forward pass of the body takes so that its widest fp32 activation (the
    FFN's, or the attention scores where they are materialized) stays within `budget_bytes` (at least one)."""
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    widest = max(
        int(getattr(config, "intermediate_size", 0) or 4 * hidden),
        hidden,
        int(getattr(config, "num_attention_heads", 1) or 1) * length,
    )
    return max(1, budget_bytes // (length * widest * 4))


def head_inputs(net: nn.Module, input_ids: Tensor, attention_mask: Tensor, budget_bytes: int | None = None) -> Tensor:
    """The hidden states the (bypassed) MLM decoder would read, [B, L, H]. On CPU without autograd the body runs in row
    chunks of `body_rows` (budget: BODY_BYTES); with autograd (its activations are kept for the backward anyway) or on
    an accelerator (no glibc heap there, and smaller kernels would only be slower) in one pass. Rows are independent
    in the body; an int8 body quantizes each chunk's activations on their own range."""
    B, L = input_ids.shape
    one_pass = torch.is_grad_enabled() or input_ids.device.type != "cpu"
    step = B if one_pass else body_rows(getattr(net, "config", None), L, budget_bytes or BODY_BYTES)
    if step >= B:
        return net(input_ids=input_ids, attention_mask=attention_mask).logits
    return torch.cat(
        [
            net(input_ids=input_ids[i : i + step], attention_mask=attention_mask[i : i + step]).logits
            for i in range(0, B, step)
        ]
    )
