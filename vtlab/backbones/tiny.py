"""Tiny randomly initialized backbones built from the real configs and tokenizers of ModernBERT, RoBERTa and BERT:
they exercise those code paths offline, where no such weights exist (generated once into $VTLAB_CACHE)."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from vtlab.backbones.cached import CachedBackbone
from vtlab.core.assets import asset_path
from vtlab.core.atomic import stable_hash
from vtlab.core.errors import AssetError

T = TypeVar("T")


class _GeneratedBackbone(CachedBackbone):
    """Tokenizer built from an offline asset + random-init model, saved once under the cache, then loaded from there."""

    recipe = "override"  # bump when the build changes, so old caches are not reused
    disk_errors = False
    prefix = "generated"
    random_init = True
    family = "override"  # the architecture family (Backbone.family)

    def __init__(
        self,
        hidden_size: int = 128,
        num_hidden_layers: int = 2,
        num_attention_heads: int = 2,
        intermediate_size: int = 256,
        seed: int = 0,
        name: str | None = None,
    ) -> None:
        self.params = dict(
            hidden_size=hidden_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            intermediate_size=intermediate_size,
            seed=seed,
        )
        key = json.dumps({"recipe": self.recipe, **self.params}, sort_keys=True)
        self.dirname = f"{self.prefix}-{stable_hash(key, length=12)}"
        super().__init__(
            name_or_path=self.prefix, family=self.family, attn_implementation="sdpa", name=name or self.prefix
        )

    def _write(self, tmp: Path) -> None:
        self._build_tokenizer().save_pretrained(tmp)
        self._build_model().save_pretrained(tmp)

    def _record(self) -> dict[str, object]:
        return {"class": type(self).__name__, "recipe": self.recipe, **self.params}

    def _seeded(self, build: Callable[[], T]) -> T:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.params["seed"])
            return build()

    def _build_tokenizer(self) -> PreTrainedTokenizerBase:
        raise NotImplementedError

    def _build_model(self) -> PreTrainedModel:
        raise NotImplementedError


class TinyModernBert(_GeneratedBackbone):
    """Random-init ModernBERT with the real ModernBERT tokenizer (OLMo BPE + ModernBERT's special tokens)."""

    recipe = "modernbert-v1"
    prefix = "tiny-modernbert"
    family = "modernbert"
    VOCAB_SIZE = 50368  # ModernBertConfig's default: 50,280 OLMo ids + 5 specials + [unusedN] padding

    def _build_tokenizer(self) -> PreTrainedTokenizerBase:
        from tokenizers import AddedToken, Tokenizer
        from tokenizers.processors import TemplateProcessing
        from transformers import PreTrainedTokenizerFast

        tk = Tokenizer.from_file(str(asset_path("olmo-tokenizer")))
        specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]  # → 50280 … 50284
        tk.add_special_tokens([AddedToken(s, special=True, normalized=False, lstrip=s == "[MASK]") for s in specials])
        tk.add_tokens([AddedToken(f"[unused{i}]", normalized=False) for i in range(self.VOCAB_SIZE - 50285)])
        tk.post_processor = TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B [SEP]",
            special_tokens=[("[CLS]", tk.token_to_id("[CLS]")), ("[SEP]", tk.token_to_id("[SEP]"))],
        )
        if tk.get_vocab_size() != self.VOCAB_SIZE or tk.token_to_id("[CLS]") != 50281:
            raise AssetError(f"olmo-tokenizer asset gave an unexpected vocabulary ({tk.get_vocab_size()} ids)")
        return PreTrainedTokenizerFast(
            tokenizer_object=tk,
            unk_token="[UNK]",
            cls_token="[CLS]",
            sep_token="[SEP]",
            pad_token="[PAD]",
            mask_token="[MASK]",
            model_max_length=8192,
        )

    def _build_model(self) -> PreTrainedModel:
        from transformers import ModernBertConfig, ModernBertForMaskedLM

        p = self.params
        config = ModernBertConfig(
            vocab_size=self.VOCAB_SIZE,
            hidden_size=p["hidden_size"],
            num_hidden_layers=p["num_hidden_layers"],
            num_attention_heads=p["num_attention_heads"],
            intermediate_size=p["intermediate_size"],
            pad_token_id=50283,
            bos_token_id=50281,
            eos_token_id=50282,
            cls_token_id=50281,
            sep_token_id=50282,
        )
        return self._seeded(lambda: ModernBertForMaskedLM(config))


# tiktoken's r50k (GPT-2) pre-tokenization regex.
GPT2_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def read_tiktoken(path: str | os.PathLike[str]) -> dict[bytes, int]:
    """A `.tiktoken` file (one `base64(token) rank` per line) → ranks; avoids depending on the tiktoken package."""
    ranks: dict[bytes, int] = {}
    for line in Path(path).read_bytes().splitlines():
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


class TinyRoberta(_GeneratedBackbone):
    """Random-init RoBERTa with a RoBERTa-layout byte-level BPE built from GPT-2's ranks.

    Layout: <s>=0 <pad>=1 </s>=2 <unk>=3, GPT-2 token t → t+4, <mask> last (50260). The pad id must stay small:
    RoBERTa's position embeddings use padding_idx=pad_token_id. Ids differ from roberta-base's fairseq order.
    """

    recipe = "roberta-v1"
    prefix = "tiny-roberta"
    family = "roberta"

    def _build_tokenizer(self) -> PreTrainedTokenizerBase:
        from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers
        from tokenizers.models import BPE
        from tokenizers.processors import RobertaProcessing
        from transformers import PreTrainedTokenizerFast
        from transformers.convert_slow_tokenizer import TikTokenConverter

        class _Converter(TikTokenConverter):
            load_tiktoken_bpe = staticmethod(read_tiktoken)

        path = str(asset_path("gpt2-bpe"))
        # The converter derives BPE merges from ranks (every split whose parts are tokens), matching tiktoken.
        gpt2_vocab, merges = _Converter(vocab_file=path, pattern=GPT2_PAT).extract_vocab_merges_from_model(path)
        specials = ["<s>", "<pad>", "</s>", "<unk>"]
        vocab = {s: i for i, s in enumerate(specials)} | {t: i + len(specials) for t, i in gpt2_vocab.items()}
        tk = Tokenizer(BPE(vocab, merges, fuse_unk=False, ignore_merges=True))
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(GPT2_PAT), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        tk.decoder = decoders.ByteLevel()
        tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
        tk.add_special_tokens([AddedToken("<mask>", special=True, normalized=False, lstrip=True)])
        tk.post_processor = RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True, add_prefix_space=False)
        return PreTrainedTokenizerFast(
            tokenizer_object=tk,
            bos_token="<s>",
            eos_token="</s>",
            sep_token="</s>",
            cls_token="<s>",
            unk_token="<unk>",
            pad_token="<pad>",
            mask_token="<mask>",
            model_max_length=512,
        )

    def _build_model(self) -> PreTrainedModel:
        from transformers import RobertaConfig, RobertaForMaskedLM

        p = self.params
        config = RobertaConfig(
            vocab_size=len(read_tiktoken(asset_path("gpt2-bpe"))) + 5,
            hidden_size=p["hidden_size"],
            num_hidden_layers=p["num_hidden_layers"],
            num_attention_heads=p["num_attention_heads"],
            intermediate_size=p["intermediate_size"],
            max_position_embeddings=514,
            type_vocab_size=1,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            layer_norm_eps=1e-5,
        )
        return self._seeded(lambda: RobertaForMaskedLM(config))


class TinyBert(_GeneratedBackbone):
    """Random-init BERT with the real bert-base-uncased WordPiece (the MiniLM asset's vocab.txt); vtlab's MLM stage
    can pretrain it (vtlab/models/mlm_pretrained.py)."""

    recipe = "bert-v1"
    prefix = "tiny-bert"
    family = "bert"

    def _build_tokenizer(self) -> PreTrainedTokenizerBase:
        return AutoTokenizer.from_pretrained(str(asset_path("minilm")))

    def _build_model(self) -> PreTrainedModel:
        from transformers import BertConfig, BertForMaskedLM

        p = self.params
        tok = self._build_tokenizer()
        config = BertConfig(
            vocab_size=len(tok),
            hidden_size=p["hidden_size"],
            num_hidden_layers=p["num_hidden_layers"],
            num_attention_heads=p["num_attention_heads"],
            intermediate_size=p["intermediate_size"],
            max_position_embeddings=512,
            pad_token_id=tok.pad_token_id,
        )
        return self._seeded(lambda: BertForMaskedLM(config))
