"""A vtlab encoder as a sentence-transformers `SparseEncoder` directory: `SparseEncoder(path)` loads it unchanged.

The modules are sentence-transformers' own, written by their own `save`:

- siamese SPLADE: `Transformer(transformer_task="fill-mask")` → `SpladePooling("max", relu | log1p_relu)`;
- two-tower SPLADE: a `Router` with one such pipeline per side (query network from `query/`);
- inference-free SPLADE: a `Router` whose query route is a frozen `SparseStaticEmbedding` holding relu(idf) (special
  tokens 0) and whose document route is the SPLADE pipeline.

What keeps the vectors identical to `encoder.encode(texts, side=...)`:
- lengths: vtlab's per-side `max_length` → `Transformer(query_length=..., document_length=...)`; the document length
  is also the tokenizer's `model_max_length`, so a plain `encode()` (no task) truncates like vtlab's doc side;
- `double_log` → `activation_function="log1p_relu"` (both are log1p(log1p(relu(max logit))));
- inference-free queries: vtlab tokenizes with special tokens and masks them; `SparseStaticEmbedding` tokenizes without
  them, so its tokenizer gets `model_max_length = query_max_length - #specials` (the same content tokens survive
  truncation) and the specials' weights are 0; both count each distinct token once (`count_repeats` cannot be
  exported);
- `vocab.preprocess` (a Normalizer): lowercasing becomes a `Lowercase` normalizer in the saved tokenizer (it matches
  `str.lower` except context-dependent cases such as Greek final sigma), the blank prefix becomes the `" "` prompt of
  both tasks (and the default prompt).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from vtlab.core.atomic import replace_dir, scratch_dir
from vtlab.core.errors import VtlabError
from vtlab.models.encoder import SpladeEncoder
from vtlab.models.inference_free import InferenceFreeEncoder
from vtlab.runs.paths import EXPORT_MANIFEST, check_export_target
from vtlab.vocab import targets

log = logging.getLogger("vtlab")

MANIFEST = EXPORT_MANIFEST  # written beside the modules: what was exported, for people (ST ignores it); it also
# marks the directory as an export, the only kind export.overwrite=true replaces (vtlab.runs.paths)


def _sentence_transformers() -> Any:
    try:
        import sentence_transformers
    except ImportError:
        raise VtlabError(
            "export: the sentence-transformers package is not installed (pip install "
            "'sentence-transformers>=5.4'), or set export.sentence_transformers=false"
        ) from None
    return sentence_transformers


def preprocess_parts(preprocess: Callable[[str], str] | None) -> tuple[bool, bool]:
    """(lowercase, blank prefix) of a vtlab input normalizer; anything else has no sentence-transformers equivalent."""
    if preprocess is None:
        return False, False
    if isinstance(preprocess, targets.Normalizer):
        return preprocess.lowercase, preprocess.blank_prefix
    known = {
        targets.to_lower: (True, False),
        targets.blank_prefix: (False, True),
        targets.blank_prefix_lower: (True, True),
    }
    if preprocess in known:
        return known[preprocess]
    raise VtlabError(
        f"export: vocab.preprocess={preprocess!r} has no sentence-transformers equivalent (exportable: "
        "vtlab.vocab.targets.Normalizer, i.e. lowercasing and/or a blank prefix)"
    )


def _add_lowercase(tokenizer: Any) -> None:
    """Prepend a Lowercase normalizer to a fast tokenizer (what vtlab's `str.lower` preprocessing does)."""
    from tokenizers import normalizers

    if not getattr(tokenizer, "is_fast", False):
        raise VtlabError(
            "export: lowercasing (vocab.preprocess) can only be baked into a fast tokenizer, "
            f"got {type(tokenizer).__name__}"
        )
    backend = tokenizer.backend_tokenizer
    current = backend.normalizer
    backend.normalizer = (
        normalizers.Lowercase() if current is None else normalizers.Sequence([normalizers.Lowercase(), current])
    )


def _write_hf(network: torch.nn.Module, tokenizer: Any, path: Path, lowercase: bool) -> Path:
    """The network + tokenizer as a Hugging Face directory, the tokenizer with lowercasing baked in if asked."""
    from transformers import AutoTokenizer

    network.save_pretrained(path)
    tokenizer.save_pretrained(path)
    if lowercase:
        tok = AutoTokenizer.from_pretrained(path)
        _add_lowercase(tok)
        tok.save_pretrained(path)
    return path


def query_static_weights(encoder: Any) -> torch.Tensor:
    """The inference-free query side as one weight per vocabulary id: relu(idf), specials 0 (ones without IDF)."""
    if encoder.count_repeats:
        raise VtlabError(
            "export: model.encoder.count_repeats=true has no sentence-transformers equivalent "
            "(SparseStaticEmbedding counts each query token once)"
        )
    if encoder.needs_idf:
        raise VtlabError(
            "export: the inference-free query side has no IDF table; fit one (fit_idf) or set model.encoder.idf_path"
        )
    weights = encoder.query_token_mask.detach().float().cpu().clone()
    if encoder.use_idf:
        weights *= torch.relu(encoder.idf.detach().float().cpu())
    return weights


def _splade_route(st: Any, path: Path, encoder: SpladeEncoder) -> list[Any]:
    modules = st.sparse_encoder.modules
    transformer = modules.Transformer(
        str(path),
        transformer_task="fill-mask",
        query_length=encoder.max_length["query"],
        document_length=encoder.max_length["doc"],
        max_seq_length=encoder.max_length["doc"],
    )
    pooling = modules.SpladePooling(
        pooling_strategy="max",
        activation_function="log1p_relu" if encoder.double_log else "relu",
        embedding_dimension=encoder.vocab_size,
    )
    return [transformer, pooling]


def _static_route(st: Any, path: Path, encoder: Any) -> list[Any]:
    from transformers import AutoTokenizer

    weights = query_static_weights(encoder)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if len(tokenizer.get_vocab()) != encoder.vocab_size:
        # SparseStaticEmbedding sizes its table by the tokenizer; queries would not line up with documents
        raise VtlabError(
            f"export: the tokenizer has {len(tokenizer.get_vocab())} tokens but the MLM head "
            f"{encoder.vocab_size} outputs; sentence-transformers' SparseStaticEmbedding needs them equal"
        )
    # vtlab truncates queries to max_length *with* specials, SparseStaticEmbedding tokenizes without them
    tokenizer.model_max_length = encoder.max_length["query"] - tokenizer.num_special_tokens_to_add(pair=False)
    return [st.sparse_encoder.modules.SparseStaticEmbedding(tokenizer=tokenizer, weight=weights, frozen=True)]


def build_sparse_encoder(encoder: SpladeEncoder, work: Path) -> Any:
    """The sentence-transformers SparseEncoder equivalent to `encoder`, its networks written under `work`."""
    st = _sentence_transformers()
    lowercase, blank = preprocess_parts(encoder.preprocess)
    if isinstance(encoder, InferenceFreeEncoder):
        query_static_weights(encoder)  # fail on an unexportable query side before writing anything
    doc_dir = _write_hf(encoder.network("doc"), encoder.tokenizer, work / "doc", lowercase)
    doc_route = _splade_route(st, doc_dir, encoder)
    if isinstance(encoder, InferenceFreeEncoder):
        query_route = _static_route(st, doc_dir, encoder)
    elif encoder.query_model is not None:
        query_route = _splade_route(
            st, _write_hf(encoder.query_model, encoder.tokenizer, work / "query", lowercase), encoder
        )
    else:
        query_route = None
    if query_route is None:
        modules = doc_route
    else:
        # default_route: a plain encode() (no task) encodes documents, as vtlab's default side does
        modules = [
            st.sparse_encoder.modules.Router.for_query_document(
                query_modules=query_route, document_modules=doc_route, default_route="document"
            )
        ]
    prompts = {"query": " ", "document": " "} if blank else None
    return st.SparseEncoder(
        modules=modules,
        device="cpu",
        prompts=prompts,
        default_prompt_name="document" if blank else None,
        similarity_fn_name="dot",
    )


def encoder_settings(encoder: SpladeEncoder) -> dict[str, Any]:
    """The encoder's kind and settings, as the export records them (MANIFEST's "encoder", the model card)."""
    kind = (
        "inference-free"
        if isinstance(encoder, InferenceFreeEncoder)
        else "two-tower"
        if encoder.query_model is not None
        else "siamese"
    )
    out: dict[str, Any] = {
        "kind": kind,
        "vocab_size": encoder.vocab_size,
        "max_length": dict(encoder.max_length),
        "double_log": encoder.double_log,
        "preprocess": repr(encoder.preprocess),
    }
    if kind == "inference-free":
        out.update(use_idf=encoder.use_idf, idf_source=getattr(encoder.idf_table, "source", None))
    return out


def check_target(out: Path, overwrite: bool, key: str) -> bool:
    """Whether `out` holds something to replace; an error if that is not allowed: a file, a non-empty directory
    without overwrite, or with overwrite anything but an earlier export (its MANIFEST) or an empty directory, so that
    overwrite=true never deletes a folder of runs or data (vtlab.runs.paths.check_export_target)."""
    return check_export_target(out, overwrite, key)


def export_sentence_transformers(
    encoder: SpladeEncoder,
    out: str | Path,
    overwrite: bool = False,
    source: dict[str, Any] | None = None,
    extras: Sequence[Callable[[Path], Any]] = (),
) -> Path:
    """Write `encoder` to `out` as a SparseEncoder directory (built beside it, then renamed into place).

    `extras`: writers called with the finished directory before it is renamed into place (ONNX graphs, the model
    card), so they appear all together or not at all."""
    out = Path(out).absolute()
    check_target(out, overwrite, "export.out")  # before the work, not after it
    with scratch_dir(out) as tmp:
        model = build_sparse_encoder(encoder, tmp / "hf")
        model.save(str(tmp / "model"))
        (tmp / "model" / MANIFEST).write_text(
            json.dumps({"encoder": encoder_settings(encoder), "source": source or {}}, indent=2, default=str) + "\n"
        )
        for write in extras:
            write(tmp / "model")
        check_target(out, overwrite, "export.out")  # again: something may have been written there meanwhile
        replace_dir(tmp / "model", out)  # renames only: readers see the old directory or the new one, whole
    log.info("export: sentence-transformers SparseEncoder written to %s", out)
    return out
