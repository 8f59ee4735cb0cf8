"""A local model directory, admitted before transformers reads any of it: `admit_model_dir` is the one gate every
reader passes (vtlab.backbones.pretrained.Backbone loads every backbone, tokenizer, vocab.tokenizer and a run's saved
model/ through it). Refused, each with one AssetError line naming the directory or file and what is expected:

- a config.json or tokenizer_config.json that names Python code (`auto_map`), unless the run opted in
  (`trust_remote_code` in the backbone config and `backbone.allow_remote_code=true`): transformers itself imports such
  code only when asked, but loads a known architecture (model_type bert) that names code without a word, and the
  code's names would travel on into what vtlab saves and exports;
- pickle weights only (`pytorch_model.bin`): unpickling a crafted file can run code, so only safetensors are loaded;
- a missing config.json or weights file (a shard), or config.json sizes no real model has.

Hub ids and offline assets are not directories here: the hub's own loading applies to them."""

from __future__ import annotations

import os
from pathlib import Path

from vtlab.core.errors import AssetError, gib
from vtlab.core.json_files import JsonFileError, read_json


def admit_model_dir(
    source: str, field: str, *, code_allowed: bool = False, weights: bool = False, tokenizer: bool = False
) -> None:
    """AssetError (one line naming `field` or the file) unless the local directory `source` may be read: no `auto_map`
    unless `code_allowed` (the run opted in), then, when the reader loads them, its weights (`weights`:
    check_model_dir) or its tokenizer files (`tokenizer`: check_tokenizer_dir; a tokenizer built by the model's own
    code has none). Anything else (a hub id, an asset name) passes: it is not a directory."""
    if not os.path.isdir(source):
        return
    code = auto_map(source)
    if code and not code_allowed:
        raise AssetError(
            f"{field}={source!r} contains its own Python code ({', '.join(code)}), which vtlab does not import: use a "
            "model that needs none, or set trust_remote_code: true in its backbone config and pass "
            "backbone.allow_remote_code=true after reading that code"
        )
    if weights:
        check_model_dir(source, field)
    if tokenizer and not code:
        check_tokenizer_dir(source, field)


def auto_map(source: str) -> list[str]:
    """The modules:classes a model directory's config.json (or tokenizer_config.json) asks transformers to import."""
    found: dict[str, None] = {}
    for name in ("config.json", "tokenizer_config.json"):
        try:
            data = read_json(Path(source) / name)
        except JsonFileError:
            continue
        mapping = data.get("auto_map")
        for value in mapping.values() if isinstance(mapping, dict) else ():
            for ref in value if isinstance(value, list) else [value]:
                if isinstance(ref, str):
                    found[ref] = None
    return list(found)


# The weights vtlab loads, whole or sharded as <name>.index.json + the shards it lists; and the pickle weights it
# refuses (a crafted pickle runs code when unpickled), named when a directory holds nothing else.
WEIGHTS = "model.safetensors"
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")
EXPECTED = f"expected {WEIGHTS} (or a sharded {WEIGHTS}.index.json with its shards)"
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
        weight_map = read_json(index).get("weight_map", {})
    except JsonFileError:
        return []  # unreadable: transformers' own error (or _damaged_json) names it
    return sorted(f for f in set(weight_map.values()) if isinstance(f, str) and not (index.parent / f).is_file())


def check_model_dir(source: str, field: str, memory: int | None = None) -> None:
    """A local model directory must hold config.json and its safetensors weights (whole or every shard: pickle weights
    are refused, `_check_weights`), and config.json's sizes must be positive integers whose fp32 embedding tables fit
    in `memory` bytes (default: this machine's): AssetError naming what is missing or the file and key otherwise. Only
    a directory is checked (hub ids load through the hub)."""
    root = Path(source)
    if not root.is_dir():
        return
    config = root / "config.json"
    if not config.is_file():
        raise AssetError(
            f"{config}: missing: a model directory needs config.json beside its weights (config key: {field})"
        )
    _check_weights(root, field)
    _check_sizes(config, field, physical_memory() if memory is None else memory)


def _check_weights(root: Path, field: str) -> None:
    """AssetError unless `root` holds model.safetensors, or its index and every shard it names; one naming the pickle
    file when that is all there is."""
    index = root / f"{WEIGHTS}.index.json"
    if (root / WEIGHTS).is_file():
        return
    if index.is_file():
        if missing := _missing_shards(index):
            raise AssetError(
                f"{index}: names {missing[0]}, which is missing from {root} ({len(missing)} shard(s) "
                f"missing; config key: {field}): copy or download the whole model"
            )
        return
    pickled = next((root / name for name in PICKLE_WEIGHTS if (root / name).is_file()), None)
    if pickled is not None:
        raise AssetError(
            f"{pickled}: pickle weights, which vtlab does not load (unpickling a crafted file runs code): {EXPECTED}; "
            f"load the model once where you trust it and save it with save_pretrained (config key: {field})"
        )
    raise AssetError(f"{root}: no model weights: {EXPECTED} beside config.json (config key: {field})")


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


def check_tokenizer_dir(source: str, field: str) -> None:
    """A local directory loaded as a tokenizer must hold its files: without them transformers builds a near-empty
    default tokenizer that maps every word to unknown (and a model trained or evaluated with it scores noise)."""
    root = Path(source)
    if root.is_dir() and not any((root / name).is_file() for name in TOKENIZER_FILES):
        raise AssetError(
            f"{root}: no tokenizer files: expected {TOKENIZER_FILES[0]} (or {', '.join(TOKENIZER_FILES[1:])}) in the "
            f"model directory, or name the tokenizer with backbone.tokenizer=<dir or hub id> (config key: {field})"
        )


def _check_sizes(config: Path, field: str, memory: int | None) -> None:
    try:
        data = read_json(config)
    except JsonFileError:
        return  # unreadable: _damaged_json names it when transformers fails on it
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
