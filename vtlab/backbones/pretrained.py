"""Load any HF masked-LM + tokenizer by hub id, local directory (admitted first: vtlab.backbones.model_dir) or offline
asset, with a uniform MLM decoder (vtlab.backbones.heads); bad or missing files and an unreachable hub are one
AssetError line naming the config key."""

from __future__ import annotations

import logging
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
from vtlab.backbones.model_dir import admit_model_dir, auto_map
from vtlab.backbones.model_dir import check_model_dir as check_model_dir  # also importable beside the loader
from vtlab.backbones.model_dir import check_tokenizer_dir as check_tokenizer_dir  # also importable beside the loader
from vtlab.core import hub
from vtlab.core.assets import looks_like_path, resolve, source_key
from vtlab.core.errors import AssetError, ConfigError
from vtlab.core.json_files import JsonFileError, read_json

T = TypeVar("T")
log = logging.getLogger("vtlab")


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
            read_json(path, expected=object)
        except JsonFileError as e:  # names the file
            return f"{e}; the file is truncated or damaged (config key: {field}): rebuild or re-download it"
    return None


# ---- the tokenizer a model directory gave -------------------------------------------------------------------------
_PROBE = "the cat sat on the mat"  # words every tokenizer of a language model knows


def check_tokenizer_encodes(tokenizer: Any, source: str, field: str) -> None:
    """A tokenizer must encode plain English words into known tokens, not unknown ones only."""
    ids = tokenizer(_PROBE, add_special_tokens=False)["input_ids"]
    unk = getattr(tokenizer, "unk_token_id", None)
    if not ids or (unk is not None and all(i == unk for i in ids)):
        raise AssetError(
            f"{field}={source!r}: its tokenizer maps {_PROBE!r} to unknown tokens only ({len(ids)} ids): a damaged or "
            "empty vocabulary; expected the model's own tokenizer files"
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
                f"{', '.join(auto_map(source)) or 'the modules its config.json auto_map names'}",
                file=sys.stderr,
            )
        return True

    def _load(
        self,
        loader: Callable[..., T],
        source: str,
        field: str,
        *,
        weights: bool = False,
        tokenizer: bool = False,
        **kwargs: Any,
    ) -> T:
        """`loader(source, **kwargs)` once the directory is admitted (vtlab.backbones.model_dir.admit_model_dir, its
        `weights` or `tokenizer` files too when the loader reads them), its failures one AssetError line."""
        kwargs["trust_remote_code"] = code = self._remote_code(source, field)
        admit_model_dir(source, field, code_allowed=code, weights=weights, tokenizer=tokenizer)
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
            raise AssetError(  # transformers refused a hub model's own code (auto_map): nothing of it ran
                f"{field}={source!r} contains its own Python code ({', '.join(auto_map(source)) or 'auto_map'}), "
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
                raise AssetError(hub.must_download(field, source)) from exc
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise AssetError(f"{field}={source!r} could not be loaded: {first}") from exc

    # -- public ------------------------------------------------------------------------------------------------------
    def load_tokenizer(self) -> PreTrainedTokenizerBase:
        source, field = self._source(tokenizer=True)
        tokenizer = self._load(AutoTokenizer.from_pretrained, source, field, tokenizer=True)
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
        # fp32: transformers 5 defaults to dtype="auto", which would keep bf16 hub checkpoints bf16 on CPU.
        kwargs: dict[str, Any] = {"output_loading_info": True, "dtype": torch.float32}
        attn = self.attn_implementation or "sdpa"
        try:
            model, info = self._load(
                AutoModelForMaskedLM.from_pretrained, source, field, weights=True, attn_implementation=attn, **kwargs
            )
        except (ValueError, ImportError):
            if self.attn_implementation is not None:
                raise
            model, info = self._load(  # no sdpa support
                AutoModelForMaskedLM.from_pretrained, source, field, weights=True, **kwargs
            )
        missing = sorted(info.get("missing_keys", ()))
        fix_decoder_bias(model, set(missing))
        if missing:  # transformers' own key-by-key table is silenced (vtlab.core.logs): this line says it once
            log.info(
                "%s=%s: %d weights not in the checkpoint start fresh (%s%s); unused: %d",
                field,
                source,
                len(missing),
                ", ".join(missing[:3]),
                ", …" if len(missing) > 3 else "",
                len(info.get("unexpected_keys", ())),
            )
        if getattr(model, "sparse_prediction", False):
            # ModernBERT's sparse_prediction drops unmasked positions when labels are given: logits would no longer
            # be (batch, length, vocab), which SPLADE pooling and the decoder bypass rely on.
            model.sparse_prediction = False
            model.config.sparse_prediction = False
        if self.family == "auto":
            self.family = str(model.config.model_type)
        return model


# -- offline, generated backbones ------------------------------------------------------------------------------------
