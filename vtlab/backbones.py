"""Load any HF masked-LM + tokenizer by hub id, local directory or offline asset, with a uniform MLM decoder.

Invariant after `Backbone.load_model()`: `model.get_output_embeddings()` is an `nn.Linear` with a bias, and that bias
is the effective output bias (APC edits it in place). `decoder_site(model)` says where that Linear is attached, so the
SPLADE encoder can swap it for identity and do the vocabulary-sized matmul itself.
"""
from __future__ import annotations

import base64
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors import SafetensorError, safe_open
from torch import nn
from transformers import AutoModelForMaskedLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from vtlab.assets import asset_path, cache_dir, hub_offline_flag, hub_reachable, is_connection_error, looks_like_path, resolve
from vtlab.atomic import build_dir, stable_hash
from vtlab.errors import AssetError

T = TypeVar("T")

def _auto_map(source: str) -> list[str]:
    """The modules:classes a model directory's config.json (or tokenizer_config.json) asks transformers to import."""
    found: dict[str, None] = {}
    for name in ("config.json", "tokenizer_config.json"):
        try:
            data = json.loads((Path(source) / name).read_text())
        except (OSError, ValueError):
            continue
        auto_map = data.get("auto_map") if isinstance(data, dict) else None
        for value in (auto_map or {}).values() if isinstance(auto_map, dict) else ():
            for ref in value if isinstance(value, list) else [value]:
                if isinstance(ref, str):
                    found[ref] = None
    return list(found)


def _damaged_weights(source: str, field: str, exc: Exception) -> str:
    """One line naming the weights file safetensors could not read (it does not say which, for sharded models)."""
    first = " ".join(str(exc).split())[:200]
    for path in sorted(Path(source).glob("*.safetensors")) if os.path.isdir(source) else ():
        try:
            with safe_open(str(path), framework="pt"):
                pass
        except (SafetensorError, OSError) as e:
            first = " ".join(str(e).split())[:200]
            return (f"{path}: cannot read the weights ({first}); the file is truncated or damaged (config key: {field}):"
                    " rebuild or re-download it")
    return f"{field}={source!r}: cannot read the weights ({first}); a *.safetensors file is truncated or damaged"


def _damaged_json(source: str, field: str) -> str | None:
    """One line naming the first JSON file of a local model directory that does not parse (transformers' error for a
    truncated tokenizer.json or config.json names no file); None when they all parse."""
    for path in sorted(Path(source).glob("*.json")) if os.path.isdir(source) else ():
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            first = " ".join(str(e).split())[:200]
            return (f"{path}: cannot read it ({type(e).__name__}: {first}); the file is truncated or damaged (config "
                    f"key: {field}): rebuild or re-download it")
    return None


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


def _fix_decoder_bias(model: PreTrainedModel, missing_keys: set[str]) -> None:
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


class Backbone:
    """A masked-LM backbone addressed by hub id, local directory or `asset:NAME`; loads lazily."""

    def __init__(
        self,
        name_or_path: str,
        tokenizer: str | None = None,
        family: str = "auto",
        trust_remote_code: bool = False,
        attn_implementation: str | None = None,
        revision: str | None = None,
        name: str | None = None,
        allow_remote_code: bool = False,
    ) -> None:
        self.name_or_path = name_or_path
        self.tokenizer = tokenizer
        self.family = family  # informational ("bert", "roberta", "modernbert", …); "auto" → config.model_type
        # trust_remote_code: the model needs its own Python code (conf/backbone/*.yaml says so); allow_remote_code: this
        # run's opt-in (`backbone.allow_remote_code=true`) to import it. Both, or no code from a model dir/hub repo runs.
        self.trust_remote_code = bool(trust_remote_code)
        self.allow_remote_code = bool(allow_remote_code)
        self._announced: set[str] = set()
        self.attn_implementation = attn_implementation
        self.revision = revision
        self.name = name or Path(name_or_path.removeprefix("asset:")).name

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, name_or_path={self.name_or_path!r}, family={self.family!r})"

    def cache_key(self) -> str:
        """Identifies the weights + tokenizer this backbone loads (for caching derived artifacts such as transfers)."""
        return f"{self.name_or_path}|{self.tokenizer}|{self.revision}"

    # -- where to load from ------------------------------------------------------------------------------------------
    def _source(self, tokenizer: bool) -> tuple[str, str]:
        """(resolved path or hub id, config key to blame in errors)."""
        if tokenizer and self.tokenizer:
            return resolve(self.tokenizer), "backbone.tokenizer"
        return resolve(self.name_or_path), "backbone.name_or_path"

    def _remote_code(self, source: str, field: str) -> bool:
        """Whether loading may import the model's own Python code: refused (one line) unless the run opted in; when it
        did, says once on stderr which modules it will import."""
        if not self.trust_remote_code:
            return False
        if not self.allow_remote_code:
            raise AssetError(
                f"{field}={source!r} needs its own Python code (the backbone config sets trust_remote_code: true), "
                "which vtlab does not import unless this run opts in: pass backbone.allow_remote_code=true after "
                "reading that code")
        if source not in self._announced:
            self._announced.add(source)
            where = f"{source}@{self.revision}" if self.revision and not os.path.isdir(source) else source
            print(f"vtlab: backbone.allow_remote_code=true: importing the Python code of {field}={where}: "
                  f"{', '.join(_auto_map(source)) or 'the modules its config.json auto_map names'}", file=sys.stderr)
        return True

    def _load(self, loader: Callable[..., T], source: str, field: str, **kwargs: Any) -> T:
        kwargs["trust_remote_code"] = self._remote_code(source, field)
        try:
            return self._load_from(loader, source, field, **kwargs)
        except SafetensorError as exc:
            raise AssetError(_damaged_weights(source, field, exc)) from None
        except ValueError as exc:
            if "trust_remote_code" not in str(exc):
                damaged = _damaged_json(source, field)
                if damaged is None:
                    raise
                raise AssetError(damaged) from None
            raise AssetError(  # transformers refused the model's own code (auto_map): nothing of it ran
                f"{field}={source!r} contains its own Python code ({', '.join(_auto_map(source)) or 'auto_map'}), "
                "which vtlab does not import: use a model that needs none, or set trust_remote_code: true in its "
                "backbone config and pass backbone.allow_remote_code=true after reading that code") from None

    def _load_from(self, loader: Callable[..., T], source: str, field: str, **kwargs: Any) -> T:
        if os.path.isdir(source):
            return loader(source, **kwargs)
        if looks_like_path(source):
            raise AssetError(f"{field}={source!r} is not an existing local directory")
        offline = hub_offline_flag() or not hub_reachable()
        try:
            # local_files_only when offline: a cached model still loads, an uncached one fails at once, no retries.
            return loader(source, revision=self.revision, local_files_only=offline, **kwargs)
        except OSError as exc:
            if offline or is_connection_error(exc):
                raise AssetError(
                    f"{field}={source!r} must be downloaded from the Hugging Face hub, which is unreachable (offline). "
                    f"Run once with network or point {field} at a local directory."
                ) from exc
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise AssetError(f"{field}={source!r} could not be loaded: {first}") from exc

    # -- public ------------------------------------------------------------------------------------------------------
    def load_tokenizer(self) -> PreTrainedTokenizerBase:
        source, field = self._source(tokenizer=True)
        tokenizer = self._load(AutoTokenizer.from_pretrained, source, field)
        if self.tokenizer:
            self._check_vocab_fits(tokenizer)
        return tokenizer

    def _check_vocab_fits(self, tokenizer: PreTrainedTokenizerBase) -> None:
        """A tokenizer from elsewhere (backbone.tokenizer) must not emit ids past the model's embedding rows: they would
        fail as an index error deep inside the first forward pass (or, on GPU, as a device-side assert)."""
        from transformers import AutoConfig

        source, field = self._source(tokenizer=False)
        rows = getattr(self._load(AutoConfig.from_pretrained, source, field), "vocab_size", None)
        if isinstance(rows, int) and len(tokenizer) > rows:
            raise AssetError(
                f"backbone.tokenizer={self.tokenizer!r} has {len(tokenizer)} tokens but {field}={self.name_or_path!r} "
                f"has {rows} embedding rows (config vocab_size): expected a tokenizer of at most {rows} tokens, e.g. "
                "the model's own (backbone.tokenizer=null); to move a model to another vocabulary use vocab=...")

    def load_model(self) -> PreTrainedModel:
        source, field = self._source(tokenizer=False)
        # fp32: transformers 5 defaults to dtype="auto", which would keep bf16 hub checkpoints bf16 on CPU.
        kwargs: dict[str, Any] = {"output_loading_info": True, "dtype": torch.float32}
        attn = self.attn_implementation or "sdpa"
        try:
            model, info = self._load(
                AutoModelForMaskedLM.from_pretrained, source, field, attn_implementation=attn, **kwargs
            )
        except (ValueError, ImportError):
            if self.attn_implementation is not None:
                raise
            model, info = self._load(AutoModelForMaskedLM.from_pretrained, source, field, **kwargs)  # no sdpa support
        _fix_decoder_bias(model, set(info.get("missing_keys", ())))
        if getattr(model, "sparse_prediction", False):
            # ModernBERT's sparse_prediction drops unmasked positions when labels are given: logits would no longer
            # be (batch, length, vocab), which SPLADE pooling and the decoder bypass rely on.
            model.sparse_prediction = False
            model.config.sparse_prediction = False
        if self.family == "auto":
            self.family = str(model.config.model_type)
        return model


# -- offline, generated backbones ------------------------------------------------------------------------------------
class _GeneratedBackbone(Backbone):
    """Tokenizer built from an offline asset + random-init model, saved once under the cache, then loaded from there."""

    recipe = "override"  # bump when the build changes, so old caches are not reused
    prefix = "generated"
    family = "override"  # the architecture family (Backbone.family)

    def __init__(self, hidden_size: int = 128, num_hidden_layers: int = 2, num_attention_heads: int = 2,
                 intermediate_size: int = 256, seed: int = 0, name: str | None = None) -> None:
        self.params = dict(hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                           num_attention_heads=num_attention_heads, intermediate_size=intermediate_size, seed=seed)
        key = json.dumps({"recipe": self.recipe, **self.params}, sort_keys=True)
        self.dirname = f"{self.prefix}-{stable_hash(key, length=12)}"
        super().__init__(name_or_path=self.prefix, family=self.family, attn_implementation="sdpa",
                         name=name or self.prefix)

    def cache_key(self) -> str:
        return self.dirname

    def _source(self, tokenizer: bool) -> tuple[str, str]:
        return str(self.materialize()), "backbone.name_or_path"

    def materialize(self) -> Path:
        """Build into the cache if absent (atomically: concurrent builders may race); return the directory."""
        final = cache_dir("backbones") / self.dirname
        complete = lambda d: (d / "vtlab_backbone.json").is_file()  # noqa: E731
        if not complete(final):
            def write(tmp: Path) -> None:
                self._build_tokenizer().save_pretrained(tmp)
                self._build_model().save_pretrained(tmp)
                (tmp / "vtlab_backbone.json").write_text(
                    json.dumps({"class": type(self).__name__, "recipe": self.recipe, **self.params}, indent=1)
                )

            try:  # another process may finish first: its directory wins; an incomplete earlier build is replaced
                build_dir(final, write, complete, disk_errors=False)
            except OSError:
                if not complete(final):
                    raise
        self.name_or_path = str(final)
        return final

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
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
            special_tokens=[("[CLS]", tk.token_to_id("[CLS]")), ("[SEP]", tk.token_to_id("[SEP]"))],
        )
        if tk.get_vocab_size() != self.VOCAB_SIZE or tk.token_to_id("[CLS]") != 50281:
            raise AssetError(f"olmo-tokenizer asset gave an unexpected vocabulary ({tk.get_vocab_size()} ids)")
        return PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                                       pad_token="[PAD]", mask_token="[MASK]", model_max_length=8192)

    def _build_model(self) -> PreTrainedModel:
        from transformers import ModernBertConfig, ModernBertForMaskedLM

        p = self.params
        config = ModernBertConfig(
            vocab_size=self.VOCAB_SIZE, hidden_size=p["hidden_size"], num_hidden_layers=p["num_hidden_layers"],
            num_attention_heads=p["num_attention_heads"], intermediate_size=p["intermediate_size"],
            pad_token_id=50283, bos_token_id=50281, eos_token_id=50282, cls_token_id=50281, sep_token_id=50282,
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
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(GPT2_PAT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        tk.decoder = decoders.ByteLevel()
        tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
        tk.add_special_tokens([AddedToken("<mask>", special=True, normalized=False, lstrip=True)])
        tk.post_processor = RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True, add_prefix_space=False)
        return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                       cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
                                       model_max_length=512)

    def _build_model(self) -> PreTrainedModel:
        from transformers import RobertaConfig, RobertaForMaskedLM

        p = self.params
        config = RobertaConfig(
            vocab_size=len(read_tiktoken(asset_path("gpt2-bpe"))) + 5, hidden_size=p["hidden_size"],
            num_hidden_layers=p["num_hidden_layers"], num_attention_heads=p["num_attention_heads"],
            intermediate_size=p["intermediate_size"], max_position_embeddings=514, type_vocab_size=1,
            pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5,
        )
        return self._seeded(lambda: RobertaForMaskedLM(config))


class TinyBert(_GeneratedBackbone):
    """Random-init BERT with the real bert-base-uncased WordPiece (the MiniLM asset's vocab.txt): the start of the
    CPU-scale stand-in for bert-base-uncased (pretrained by vtlab's MLM stage, see vtlab/pretrain.py)."""

    recipe = "bert-v1"
    prefix = "tiny-bert"
    family = "bert"

    def _build_tokenizer(self) -> PreTrainedTokenizerBase:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(asset_path("minilm")))

    def _build_model(self) -> PreTrainedModel:
        from transformers import BertConfig, BertForMaskedLM

        p = self.params
        tok = self._build_tokenizer()
        config = BertConfig(
            vocab_size=len(tok), hidden_size=p["hidden_size"], num_hidden_layers=p["num_hidden_layers"],
            num_attention_heads=p["num_attention_heads"], intermediate_size=p["intermediate_size"],
            max_position_embeddings=512, pad_token_id=tok.pad_token_id,
        )
        return self._seeded(lambda: BertForMaskedLM(config))
