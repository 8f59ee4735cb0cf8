"""Vocabulary Transfer: put a source masked-LM onto a target vocabulary (the paper's VT, authors' transform.py).

Input embeddings come from an `Initializer` (vtlab/vocab/init.py); the MLM decoder is replaced by a new Linear of the
target size whose weight is tied to the new embeddings; its bias is the target model's MLM bias z-score-mapped into the
source bias distribution (`bias=zmap`, the authors' --set_bias), zeros, or carried through the initializer like one
more embedding column (`bias=init`: overlap tokens keep their source bias, new ones get the same combination of source
biases as their embedding — the choice when the target vocabulary has no trained model); optionally all embeddings
and the bias are rescaled by one scalar so
overlap tokens have the target model's mean norm (`target_norm`). The encoder and the MLM head transform stay the
source model's. Results are cached by (backbone, vocab, init, options).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, get_args

import torch
from torch import Tensor, nn

from vtlab.backbones import Backbone, decoder_site
from vtlab.core import integrity
from vtlab.core.assets import cache_dir
from vtlab.core.cache_keys import settings_key
from vtlab.core.choices import TransferBias
from vtlab.core.errors import VtlabError
from vtlab.core.paths import child
from vtlab.vocab.canonical import Overlap, match_vocabularies
from vtlab.vocab.init import Initializer
from vtlab.vocab.targets import TargetVocab

log = logging.getLogger("vtlab")


@dataclass(frozen=True)
class TransferOptions:
    """Output-layer and matching switches (authors' flags: --set_bias, --use_target_norm, --fuzzy)."""

    bias: TransferBias = "zmap"  # zmap falls back to init when the vocabulary has no target model
    target_norm: bool = True
    fuzzy: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.bias not in BIAS_MODES:
            raise VtlabError(f"transfer.bias must be one of {', '.join(BIAS_MODES)}, got {self.bias!r}")


BIAS_MODES: tuple[str, ...] = get_args(TransferBias)


def zscore_map(target_bias: Tensor, source_bias: Tensor) -> Tensor:
    """b_new = (b_tgt − μ_tgt) / σ_tgt · σ_src + μ_src: the target MLM bias moved into the source bias distribution."""
    t, s = target_bias.double(), source_bias.double()
    std_t = t.std()
    if not torch.isfinite(std_t) or std_t == 0:
        raise VtlabError(
            "transfer.bias=zmap: the target model's MLM bias is constant (untrained head?); "
            "use transfer.bias=init or transfer.bias=zeros"
        )
    return ((t - t.mean()) / std_t * s.std() + s.mean()).float()


def target_norm_scale(target_embeddings: Tensor, new_embeddings: Tensor, overlap: Overlap) -> float:
    """α = mean ‖T[o]‖ / mean ‖E_new[o]‖ over overlap tokens o (one scalar for embeddings and bias)."""
    ids = torch.as_tensor(overlap.target_ids, dtype=torch.long)
    if ids.numel() == 0:
        return 1.0
    num = target_embeddings[ids].double().norm(dim=1).mean()
    den = new_embeddings[ids].double().norm(dim=1).mean()
    return float(num / den) if den > 0 else 1.0


def _special_ids(tokenizer) -> dict[str, int | None]:
    cls = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    sep = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    return {
        "pad_token_id": tokenizer.pad_token_id,
        "cls_token_id": cls,
        "sep_token_id": sep,
        "bos_token_id": tokenizer.bos_token_id if tokenizer.bos_token_id is not None else cls,
        "eos_token_id": tokenizer.eos_token_id if tokenizer.eos_token_id is not None else sep,
        "mask_token_id": tokenizer.mask_token_id,
    }


def _shift_positions_for_new_pad(model: nn.Module, old_pad: int | None, new_pad: int | None) -> bool:
    """RoBERTa-style embeddings number positions from padding_idx + 1; keep each real position's vector when the pad id
    changes by shifting the position table (new row k = old row k + old_pad − new_pad)."""
    emb = getattr(model.base_model, "embeddings", None)
    pos = getattr(emb, "position_embeddings", None)
    if emb is None or pos is None or not hasattr(emb, "padding_idx") or old_pad is None or new_pad is None:
        return False
    if old_pad == new_pad:
        return False
    n = pos.weight.shape[0]
    src = (torch.arange(n) + (old_pad - new_pad)).clamp(0, n - 1)
    with torch.no_grad():
        pos.weight.copy_(pos.weight[src].clone())
    emb.padding_idx = new_pad
    pos.padding_idx = new_pad
    return True


def apply_transfer(
    model: nn.Module,
    source_tokenizer,
    target_tokenizer,
    init: Initializer,
    target_embeddings: Tensor | None = None,
    target_bias: Tensor | None = None,
    options: TransferOptions = TransferOptions(),
) -> dict[str, Any]:
    """Transform `model` in place onto `target_tokenizer`'s vocabulary; returns the report."""
    start = time.perf_counter()
    overlap = match_vocabularies(source_tokenizer, target_tokenizer, fuzzy=options.fuzzy)
    source_emb = model.get_input_embeddings().weight.detach().float()
    source_bias = model.get_output_embeddings().bias
    source_bias = source_bias.detach().float() if source_bias is not None else torch.zeros(source_emb.shape[0])
    generator = torch.Generator().manual_seed(options.seed)
    bias_mode = options.bias if (options.bias != "zmap" or target_bias is not None) else "init"
    # bias=init: the bias rides along as one more embedding column, so every rule (copy, semantic weights, subword
    # pieces, random) fills it exactly as it fills that token's embedding
    source_rows = torch.cat([source_emb, source_bias.unsqueeze(1)], 1) if bias_mode == "init" else source_emb
    new_rows, init_stats = init(
        source_rows,
        overlap,
        target_size=len(target_tokenizer),
        source_tokenizer=source_tokenizer,
        target_tokenizer=target_tokenizer,
        target_embeddings=target_embeddings,
        initializer_range=float(getattr(model.config, "initializer_range", 0.02)),
        generator=generator,
    )
    new_emb = new_rows[:, : source_emb.shape[1]]
    V, H = new_emb.shape
    if bias_mode == "init":
        bias = new_rows[:, -1].clone()
    elif bias_mode == "zmap":
        bias = zscore_map(target_bias, source_bias)
    else:
        bias = torch.zeros(V)
    alpha = 1.0
    if options.target_norm and target_embeddings is not None:
        alpha = target_norm_scale(target_embeddings, new_emb, overlap)
        new_emb, bias = new_emb * alpha, bias * alpha

    old_pad = model.config.pad_token_id
    ids = _special_ids(target_tokenizer)
    embedding = nn.Embedding(V, H, padding_idx=ids["pad_token_id"])
    with torch.no_grad():
        embedding.weight.copy_(new_emb)
    model.set_input_embeddings(embedding)
    decoder = nn.Linear(H, V, bias=True)
    decoder.weight = embedding.weight  # tied: one matrix for input and output
    with torch.no_grad():
        decoder.bias.copy_(bias)
    parent, attr = decoder_site(model)
    setattr(parent, attr, decoder)
    if isinstance(getattr(parent, "bias", None), nn.Parameter):
        parent.bias = decoder.bias  # BERT/RoBERTa keep a second handle on the decoder bias
    shifted = _shift_positions_for_new_pad(model, old_pad, ids["pad_token_id"])
    for key, value in ids.items():
        setattr(model.config, key, value)
    model.config.vocab_size = V
    model.config.tie_word_embeddings = True

    emb_norms = new_emb.norm(dim=1)
    return {
        "source_vocab_size": overlap.source_size,
        "target_vocab_size": V,
        "overlap": overlap.report(),
        "init": {"name": getattr(init, "name", type(init).__name__), **init_stats},
        "target_norm_scale": alpha,
        "fuzzy": options.fuzzy,
        "norms": {
            "source_mean": float(source_emb.norm(dim=1).mean()),
            "new_mean": float(emb_norms.mean()),
            "new_overlap_mean": float(emb_norms[torch.as_tensor(overlap.target_ids, dtype=torch.long)].mean())
            if len(overlap.target_ids)
            else None,
            "target_mean": float(target_embeddings.norm(dim=1).mean()) if target_embeddings is not None else None,
        },
        "bias": {
            "mode": bias_mode,
            "source_mean": float(source_bias.mean()),
            "new_mean": float(bias.mean()),
            "new_std": float(bias.std()),
        },
        "position_table_shifted": shifted,
        "seconds": time.perf_counter() - start,
    }


def _target_model_tensors(vocab: TargetVocab, options: TransferOptions) -> tuple[Tensor | None, Tensor | None]:
    source = vocab.embedding_source()
    if source is None:
        return None, None
    # a Backbone object (e.g. an MLMPretrained testbed backbone) or a hub id / directory / asset:NAME
    model = (source if isinstance(source, Backbone) else Backbone(source)).load_model()
    emb = model.get_input_embeddings().weight.detach().float().clone()
    dec = model.get_output_embeddings()
    bias = (
        dec.bias.detach().float().clone()
        if (options.bias == "zmap" and dec is not None and dec.bias is not None)
        else None
    )
    return emb, bias


VERSION = 2  # bump when a transfer computes differently from the same settings (2: punctuation across word markers)
DERIVED_VERSION = 1  # the same for a derived model (it uses no overlap: VERSION 2 left it unchanged)


def _cache_key(backbone: Backbone, vocab: TargetVocab, init: Initializer, options: TransferOptions) -> str:
    """The transfer's settings; the seed only where the init draws from it (`Initializer.draws`): a deterministic init
    (semantic, subword, mean) gives every run seed the same rows, and so the same cached model and MLM adaptation."""
    options = options if init.draws else replace(options, seed=0)
    return settings_key("transfer", VERSION, backbone=backbone, vocab=vocab, init=init, options=options)


def _derived_key(backbone: Backbone, vocab: TargetVocab) -> str:
    # init and transfer options do not touch a derived model; the vocabulary's key carries its recipe version
    return settings_key("derived-model", DERIVED_VERSION, backbone=backbone, vocab=vocab)


def check_compatible(vocab: TargetVocab, init: Initializer) -> None:
    """Fail before any work when the init needs target-model embeddings that the vocabulary does not have."""
    derived = vocab.DERIVES_MODEL  # no init runs
    if vocab.transfers and not derived and init.needs_target_embeddings and vocab.embedding_source() is None:
        raise VtlabError(
            f"init={init.name} needs a target model with input embeddings (vocab.embedding_model), and "
            f"vocab={vocab.name} has none; use init=subword or init=mean"
        )


def cached_transfer(
    backbone: Backbone, vocab: TargetVocab, init: Initializer, options: TransferOptions = TransferOptions()
) -> Path:
    """HF model directory of `backbone` transferred to `vocab` with `init`, computed once per configuration. A
    vocabulary with DERIVES_MODEL makes its model from the source one itself (`TargetVocab.derive_model`, e.g.
    vtlab/vocab/masked_outputs.py), cached per (backbone, vocab) alone: `init` and `options` are not used."""
    check_compatible(vocab, init)
    if vocab.DERIVES_MODEL:
        out = child(cache_dir("transfers"), f"{vocab.name}-{_derived_key(backbone, vocab)}", "vocab.name")
        return _cached_model(
            out, backbone, vocab, lambda model, source_tok, target_tok: vocab.derive_model(model, source_tok)
        )

    def transfer(model: nn.Module, source_tok: Any, target_tok: Any) -> dict[str, Any]:
        target_emb, target_bias = _target_model_tensors(vocab, options)
        return apply_transfer(model, source_tok, target_tok, init, target_emb, target_bias, options)

    name = f"{vocab.name}-{init.name}-{_cache_key(backbone, vocab, init, options)}"
    out = child(cache_dir("transfers"), name, "vocab.name / init.name")
    return _cached_model(out, backbone, vocab, transfer)


def _cached_model(
    out: Path, backbone: Backbone, vocab: TargetVocab, make: Callable[[nn.Module, Any, Any], dict[str, Any]]
) -> Path:
    """`out` when it is a usable cache entry; else `backbone`'s model changed in place by `make(model, source
    tokenizer, vocab's tokenizer)` (its report), saved there with that tokenizer and transfer_report.json."""
    if out.exists():
        if (damage := integrity.problem(out)) is None:
            log.info("vocabulary transfer: cached %s", out)
            return out
        log.warning("vocabulary transfer cache %s is not usable (%s): rebuilding it", out, damage)
    model = backbone.load_model()
    source_tok = backbone.load_tokenizer()
    target_tok = vocab.load_tokenizer(source_tok)
    report = make(model, source_tok, target_tok)
    report.update(backbone=backbone.name_or_path, vocab=vocab.name)

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        target_tok.save_pretrained(tmp)
        (tmp / "transfer_report.json").write_text(json.dumps(report, indent=2))

    integrity.build(out, write)
    log.info(
        "vocabulary transfer: %s → %s in %.1fs (%s): %s",
        backbone.name_or_path,
        vocab.name,
        report["seconds"],
        out.name,
        report["overlap"],
    )
    return out


def transferred_backbone(
    backbone: Backbone, vocab: TargetVocab, init: Initializer, options: TransferOptions = TransferOptions()
) -> Backbone:
    """The backbone a run should load: the transferred directory when `vocab` changes the vocabulary."""
    if not vocab.transfers:
        return backbone
    return backbone.derived(str(cached_transfer(backbone, vocab, init, options)))
