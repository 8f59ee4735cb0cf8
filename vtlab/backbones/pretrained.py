"""Load any HF masked-LM + tokenizer by hub id, local directory or offline asset, with a uniform MLM decoder
(vtlab.backbones.heads); bad or missing files and an unreachable hub are one AssetError line naming the config key."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from safetensors import SafetensorError, safe_open
from torch import nn
from transformers import AutoModelForMaskedLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from vtlab.backbones.heads import fix_decoder_bias
from vtlab.core import hub
from vtlab.core.assets import looks_like_path, resolve, source_key
from vtlab.core.errors import AssetError, ConfigError, gib

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
            return (
                f"{path}: cannot read the weights ({first}); the file is truncated or damaged "
                f"(config key: {field}):"
                " rebuild or re-download it"
            )
    return f"{field}={source!r}: cannot read the weights ({first}); a *.safetensors file is truncated or damaged"


def _damaged_json(source: str, field: str) -> str | None:
    """One line naming the first JSON file of a local model directory that does not parse (transformers' error for a
    truncated tokenizer.json or config.json names no file); None when they all parse."""
    for path in sorted(Path(source).glob("*.json")) if os.path.isdir(source) else ():
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            first = " ".join(str(e).split())[:200]
            return (
                f"{path}: cannot read it ({type(e).__name__}: {first}); the file is truncated or damaged (config "
                f"key: {field}): rebuild or re-download it"
            )
    return None


# ---- a local model directory, checked before transformers reads it -------------------------------------------------
# The weights transformers loads into a PyTorch model, each also sharded as <name>.index.json + the shards it lists.
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# config.json sizes that shape the model: each must be a positive integer when present.
SIZE_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
)
# Embedding tables config.json sizes as rows × hidden_size. vtlab loads fp32 (4 bytes a value): a table larger than the
# machine's whole memory cannot be a real model's, only a damaged or edited config.json (transformers would fail
# allocating it, or after reading every weight, with an error that names no file).
TABLE_KEYS = {"vocab_size": "word-embedding", "max_position_embeddings": "position-embedding"}
FP32_BYTES = 4


def physical_memory() -> int | None:
    """Bytes of memory this machine has (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def _missing_shards(index: Path) -> list[str]:
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
    except (OSError, ValueError, AttributeError):
        return []  # unreadable: transformers' own error (or _damaged_json) names it
    return sorted(f for f in set(weight_map.values()) if isinstance(f, str) and not (index.parent / f).is_file())


def check_model_dir(source: str, field: str, memory: int | None = None) -> None:
    """A local model directory must hold config.json and its weights (whole or every shard), and config.json's sizes
    must be positive integers whose fp32 embedding tables fit in `memory` bytes (default: this machine's): AssetError
    naming what is missing or the file and key otherwise. Only a directory is checked (hub ids load through the hub)."""
    root = Path(source)
    if not root.is_dir():
        return
    config = root / "config.json"
    if not config.is_file():
        raise AssetError(
            f"{config}: missing: a model directory needs config.json beside its weights (config key: {field})"
        )
    for name in WEIGHT_FILES:
        index = root / f"{name}.index.json"
        if (root / name).is_file():
            break
        if index.is_file():
            if missing := _missing_shards(index):
                raise AssetError(
                    f"{index}: names {missing[0]}, which is missing from {root} ({len(missing)} shard(s) "
                    f"missing; config key: {field}): copy or download the whole model"
                )
            break
    else:
        raise AssetError(
            f"{root}: no model weights: expected {' or '.join(WEIGHT_FILES)} (or a sharded *.index.json "
            f"with its shards) beside config.json (config key: {field})"
        )
    _check_sizes(config, field, physical_memory() if memory is None else memory)


# what a tokenizer directory holds, one of these at least: a fast tokenizer, a WordPiece or BPE vocabulary, a
# SentencePiece model
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "sentencepiece.model",
)
_PROBE = "the cat sat on the mat"  # words every tokenizer of a language model knows


def check_tokenizer_dir(source: str, field: str) -> None:
    """A local directory loaded as a tokenizer must hold its files: without them transformers builds a near-empty
    default tokenizer that maps every word to unknown (and a model trained or evaluated with it scores noise)."""
    root = Path(source)
    if root.is_dir() and not any((root / name).is_file() for name in TOKENIZER_FILES):
        raise AssetError(
            f"{root}: no tokenizer files: expected {TOKENIZER_FILES[0]} (or {', '.join(TOKENIZER_FILES[1:])}) in the "
            f"model directory, or name the tokenizer with backbone.tokenizer=<dir or hub id> (config key: {field})"
        )


def check_tokenizer_encodes(tokenizer: Any, source: str, field: str) -> None:
    """A tokenizer must encode plain English words into known tokens, not unknown ones only."""
    ids = tokenizer(_PROBE, add_special_tokens=False)["input_ids"]
    unk = getattr(tokenizer, "unk_token_id", None)
    if not ids or (unk is not None and all(i == unk for i in ids)):
        raise AssetError(
            f"{field}={source!r}: its tokenizer maps {_PROBE!r} to unknown tokens only ({len(ids)} ids): a damaged or "
            "empty vocabulary; expected the model's own tokenizer files"
        )


def _check_sizes(config: Path, field: str, memory: int | None) -> None:
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # unreadable: _damaged_json names it when transformers fails on it
    if not isinstance(data, dict):
        return
    for key in SIZE_KEYS:
        value = data.get(key)
        if key in data and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise AssetError(f"{config}: {key}={value!r}: expected a positive integer (config key: {field})")
    hidden = data.get("hidden_size")
    if memory is None or not isinstance(hidden, int):
        return
    for key, table in TABLE_KEYS.items():
        rows = data.get(key)
        if isinstance(rows, int) and rows * hidden * FP32_BYTES > memory:
            raise AssetError(
                f"{config}: {key}={rows}: its {table} table ({rows} × hidden_size={hidden} × {FP32_BYTES} bytes = "
                f"{gib(rows * hidden * FP32_BYTES)}) is larger than this machine's {gib(memory)} of memory: expected "
                f"the size the weights were saved with (a damaged or edited config.json?) (config key: {field})"
            )


# ---- how long an input the loaded model takes ---------------------------------------------------------------------
def position_limit(model: nn.Module) -> tuple[int, str] | None:
    """(the most tokens one input may have, why), or None when the model states no limit.

    An absolute position table (BERT, RoBERTa) is a hard limit: a longer input indexes past it. RoBERTa-style tables
    skip the rows up to padding_idx (position ids start at padding_idx + 1), so 514 rows hold 512 tokens. Without a
    table (rotary positions: ModernBERT) config.max_position_embeddings is the length the model was built for."""
    for name, module in model.named_modules():
        if name.endswith("position_embeddings") and isinstance(module, nn.Embedding):
            rows, pad = module.num_embeddings, module.padding_idx
            if pad is None:
                return rows, f"max_position_embeddings={rows}"
            return rows - pad - 1, (
                f"max_position_embeddings={rows} less the {pad + 1} positions up to padding_idx="
                f"{pad} that RoBERTa-style position ids skip"
            )
    declared = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if isinstance(declared, int) and not isinstance(declared, bool):
        return declared, f"max_position_embeddings={declared}"
    return None


def check_input_lengths(model: nn.Module, lengths: dict[str, int]) -> None:
    """Each `lengths` entry (full config key → tokens) must fit the model's positions (position_limit): ConfigError
    naming the key otherwise, before any input is encoded or trained on (a longer batch fails inside the forward pass,
    and only when a text is that long)."""
    limit = position_limit(model)
    if limit is None:
        return
    most, why = limit
    source = getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
    for key, value in lengths.items():
        if int(value) > most:
            raise ConfigError(
                f"{key}={value}: expected at most {most} tokens, the longest input the model ({source}) takes ({why})",
                key=key,
            )


class Backbone:
    """A masked-LM backbone addressed by hub id, local directory or `asset:NAME`; loads lazily."""

    random_init = False  # True for generated test backbones: weights that were never trained
    # settings that do not change the weights or tokenizer it loads (labels, admission of its code, the attention
    # kernel), so cache_key() leaves them out (vtlab.core.cache_keys)
    KEY_NEUTRAL = ("name", "family", "attn_implementation", "trust_remote_code", "allow_remote_code")

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
        # trust_remote_code: the model needs its own Python code (conf/backbone/*.yaml says so); allow_remote_code:
        # this run's opt-in (`backbone.allow_remote_code=true`) to import it. Both, or no code from a model dir/hub
        # repo runs.
        self.trust_remote_code = bool(trust_remote_code)
        self.allow_remote_code = bool(allow_remote_code)
        self._announced: set[str] = set()
        self.attn_implementation = attn_implementation
        self.revision = revision
        self.name = name or Path(name_or_path.removeprefix("asset:")).name

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, name_or_path={self.name_or_path!r}, family={self.family!r})"

    def derived(self, path: str, name: str | None = None) -> Backbone:
        """A model directory vtlab built from this one (a transfer, an MLM adaptation): loaded as this one is (its
        family, its attention implementation), under `name`."""
        return Backbone(path, family=self.family, attn_implementation=self.attn_implementation, name=name)

    def cache_key(self) -> str:
        """Identifies the weights + tokenizer this backbone loads (for caching derived artifacts such as transfers): a
        local directory by its content (vtlab.core.assets.source_key), hub ids and assets by name."""
        return f"{source_key(self.name_or_path)}|{source_key(self.tokenizer)}|{self.revision}"

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
                "reading that code"
            )
        if source not in self._announced:
            self._announced.add(source)
            where = f"{source}@{self.revision}" if self.revision and not os.path.isdir(source) else source
            print(
                f"vtlab: backbone.allow_remote_code=true: importing the Python code of {field}={where}: "
                f"{', '.join(_auto_map(source)) or 'the modules its config.json auto_map names'}",
                file=sys.stderr,
            )
        return True

    def _load(self, loader: Callable[..., T], source: str, field: str, **kwargs: Any) -> T:
        kwargs["trust_remote_code"] = self._remote_code(source, field)
        try:
            return self._load_from(loader, source, field, **kwargs)
        except SafetensorError as exc:
            raise AssetError(_damaged_weights(source, field, exc)) from None
        except RuntimeError as exc:
            if "ignore_mismatched_sizes" not in str(exc):
                raise
            where = str(Path(source) / "config.json") if os.path.isdir(source) else f"{field}={source!r}"
            raise AssetError(
                f"{where}: the weights do not fit this config: tensor shapes differ (transformers' load "
                "report above lists them); config.json was edited or belongs to other weights (config "
                f"key: {field})"
            ) from None
        except ValueError as exc:
            if "trust_remote_code" not in str(exc):
                damaged = _damaged_json(source, field)
                if damaged is None:
                    raise
                raise AssetError(damaged) from None
            raise AssetError(  # transformers refused the model's own code (auto_map): nothing of it ran
                f"{field}={source!r} contains its own Python code ({', '.join(_auto_map(source)) or 'auto_map'}), "
                "which vtlab does not import: use a model that needs none, or set trust_remote_code: true in its "
                "backbone config and pass backbone.allow_remote_code=true after reading that code"
            ) from None

    def _load_from(self, loader: Callable[..., T], source: str, field: str, **kwargs: Any) -> T:
        if os.path.isdir(source):
            return loader(source, **kwargs)
        if looks_like_path(source):
            raise AssetError(f"{field}={source!r} is not an existing local directory")
        offline = hub.offline() or not hub.reachable()
        try:
            # local_files_only when offline: a cached model still loads, an uncached one fails at once, no retries.
            return loader(source, revision=self.revision, local_files_only=offline, **kwargs)
        except OSError as exc:
            if offline or hub.is_connection_error(exc):
                raise AssetError(
                    f"{field}={source!r} must be downloaded from the Hugging Face hub, which is unreachable (offline). "
                    f"Run once with network or point {field} at a local directory."
                ) from exc
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise AssetError(f"{field}={source!r} could not be loaded: {first}") from exc

    # -- public ------------------------------------------------------------------------------------------------------
    def load_tokenizer(self) -> PreTrainedTokenizerBase:
        source, field = self._source(tokenizer=True)
        if not _auto_map(source):  # a model with its own code may build its tokenizer there (refused without opt-in)
            check_tokenizer_dir(source, field)
        tokenizer = self._load(AutoTokenizer.from_pretrained, source, field)
        check_tokenizer_encodes(tokenizer, source, field)
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
                "the model's own (backbone.tokenizer=null); to move a model to another vocabulary use vocab=..."
            )

    def load_model(self) -> PreTrainedModel:
        source, field = self._source(tokenizer=False)
        if self.trust_remote_code or not _auto_map(source):  # else transformers' refusal of its code comes first
            check_model_dir(source, field)  # what is missing or absurd, named, before transformers reads anything
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
        fix_decoder_bias(model, set(info.get("missing_keys", ())))
        if getattr(model, "sparse_prediction", False):
            # ModernBERT's sparse_prediction drops unmasked positions when labels are given: logits would no longer
            # be (batch, length, vocab), which SPLADE pooling and the decoder bypass rely on.
            model.sparse_prediction = False
            model.config.sparse_prediction = False
        if self.family == "auto":
            self.family = str(model.config.model_type)
        return model


# -- offline, generated backbones ------------------------------------------------------------------------------------
