"""Backbones: HF masked LMs with a uniform MLM decoder. `pretrained` loads them (hub id, local directory, offline
asset), `heads` does the decoder surgery SPLADE and APC rely on, `tiny` generates the small test backbones."""

from vtlab.backbones.e5 import E5Small
from vtlab.backbones.heads import decoder_bypassed, decoder_site
from vtlab.backbones.pretrained import Backbone
from vtlab.backbones.tiny import TinyBert, TinyModernBert, TinyRoberta, read_tiktoken

__all__ = [
    "Backbone",
    "E5Small",
    "TinyBert",
    "TinyModernBert",
    "TinyRoberta",
    "decoder_bypassed",
    "decoder_site",
    "read_tiktoken",
]
