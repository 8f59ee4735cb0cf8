"""MLM head surgery: where the vocabulary decoder sits, bypassing it, and a decoder bias that always exists.

Invariant after `Backbone.load_model()`: `model.get_output_embeddings()` is an `nn.Linear` with a bias, and that bias
is the effective output bias (APC edits it in place). `decoder_site(model)` says where that Linear is attached, so the
SPLADE encoder can swap it for identity and do the vocabulary-sized matmul itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn
from transformers import PreTrainedModel

from vtlab.core.errors import AssetError


def decoder_site(model: nn.Module) -> tuple[nn.Module, str]:
    """(parent module, attribute name) under which `model.get_output_embeddings()` is attached."""
    decoder = model.get_output_embeddings()
    if decoder is None:
        raise AssetError(f"{type(model).__name__} has no output embeddings (not a masked-LM head model)")
    for name, module in model.named_modules():
        if module is decoder and name:
            parent_name, _, attr = name.rpartition(".")
            return model.get_submodule(parent_name), attr
    raise AssetError(f"{type(model).__name__}: its output embeddings are not a submodule of the model")


@contextlib.contextmanager
def decoder_bypassed(model: nn.Module) -> Iterator[nn.Linear]:
    """Run the model with its MLM decoder replaced by identity, so `logits` are the hidden states fed to it.

    This keeps every family's own head transform (BERT `transform`, RoBERTa dense+gelu+LN, ModernBERT `head`) while
    letting the pooling do the vocabulary-sized matmul itself, chunked. The model object is restored afterwards,
    so saving / weight tying are untouched.
    """
    parent, attr = decoder_site(model)
    decoder = getattr(parent, attr)
    parent._modules[attr] = nn.Identity()
    try:
        yield decoder
    finally:
        parent._modules[attr] = decoder


def fix_decoder_bias(model: PreTrainedModel, missing_keys: set[str]) -> None:
    """Make `get_output_embeddings().bias` exist and be the one output bias.

    BERT/RoBERTa keep a second `bias` Parameter next to the decoder (tied to `decoder.bias` only when
    `tie_word_embeddings`); ModernBERT may be configured without a decoder bias at all.
    """
    decoder = model.get_output_embeddings()
    if not isinstance(decoder, nn.Linear):
        raise AssetError(f"{type(model).__name__}: output embeddings are {type(decoder).__name__}, expected nn.Linear")
    parent, attr = decoder_site(model)
    prefix = next(n for n, m in model.named_modules() if m is parent)
    sibling = getattr(parent, "bias", None)
    if not (isinstance(sibling, nn.Parameter) and sibling.shape == (decoder.out_features,)):
        sibling = None
    if sibling is not None and sibling is not decoder.bias:
        dec_key = f"{prefix}.{attr}.bias".lstrip(".")
        sib_key = f"{prefix}.bias".lstrip(".")
        if decoder.bias is None or (dec_key in missing_keys and sib_key not in missing_keys):
            decoder.bias = sibling  # the checkpoint stored the bias in the family's own slot
        else:
            parent.bias = decoder.bias  # keep one Parameter so APC edits and saving stay consistent
    if decoder.bias is None:
        decoder.bias = nn.Parameter(torch.zeros(decoder.out_features, dtype=decoder.weight.dtype))
        if hasattr(model.config, "decoder_bias"):
            model.config.decoder_bias = True  # so a saved model reloads with the bias
