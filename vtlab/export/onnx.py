"""A vtlab encoder as ONNX graphs that output SPLADE vectors (ONNX Runtime runs them: vtlab.export.onnx_runtime).

`export_onnx(encoder, dir)` writes, for each network of the encoder (`doc.onnx`; `query.onnx` for a two-tower model):

    inputs  input_ids [batch, seq] int64, attention_mask [batch, seq] int64  (batch and seq dynamic)
    output  sparse_embedding [batch, vocab] float32 = log1p(relu(max over real positions of the MLM logits))
            (log1p applied twice for double_log), i.e. exactly what `encoder.encode` returns, dense

beside the tokenizer (lowercasing baked in as in the sentence-transformers export) and `onnx.json` (lengths, blank
prefix, padding, which file serves which side). The pooling is inside the graph, so a serving process needs no SPLADE
code (nor torch). An inference-free model's query side has no network: its queries are weighted by the
SparseEncoder's static table.

The graph is traced with torch's TorchScript-based exporter (`dynamo=False`): it needs no onnxscript and traces the
Hugging Face masked LMs vtlab uses with dynamic batch and sequence axes.
"""

from __future__ import annotations

import copy
import logging
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from vtlab.backbones.heads import decoder_bypassed
from vtlab.core.atomic import write_json
from vtlab.core.errors import VtlabError
from vtlab.export.onnx_runtime import GRAPH_VERSION, INPUTS, MANIFEST, OUTPUT
from vtlab.export.sentence_transformers import _add_lowercase, encoder_settings, preprocess_parts
from vtlab.models.activation import splade_activation
from vtlab.models.inference_free import InferenceFreeEncoder

log = logging.getLogger("vtlab")

OPSET = 17


class SpladeGraph(nn.Module):
    """The traced function: hidden states → max over real positions of the MLM logits → SPLADE activation.

    Built so that ONNX Runtime touches the [batch, length, vocabulary] logits once (the decoder MatMul, then
    ReduceMax): pad positions are masked in the [batch, length, hidden] states (they take the first real position's
    state, which cannot change the max) instead of with a Where over the logits, and the decoder bias, constant over
    positions, is added after the max. With the logits masked by Where and the bias added before the max, those two
    passes were 80% of ORT's time (SPLADE-tiny, 16 × 256 tokens, ORT profile: Where 8.8 s, Add 3.6 s, MatMul 2.3 s).
    """

    def __init__(self, network: nn.Module, double_log: bool) -> None:
        super().__init__()
        self.network, self.double_log = network, double_log

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        with decoder_bypassed(self.network) as decoder:  # as SpladeEncoder.max_logits: the decoder's input
            hidden = self.network(input_ids=input_ids, attention_mask=attention_mask).logits
        real = attention_mask.unsqueeze(-1) != 0
        first = attention_mask.argmax(dim=1)  # the first real position (right or left padding)
        first_state = hidden[torch.arange(hidden.shape[0]), first].unsqueeze(1)
        z = torch.matmul(torch.where(real, hidden, first_state), decoder.weight.t()).amax(dim=1)
        if decoder.bias is not None:
            z = z + decoder.bias
        # a row without any real position is empty, as in SpladeEncoder (its max is over nothing: -inf → 0)
        z = torch.where(real.any(dim=1), z, torch.finfo(z.dtype).min)
        return splade_activation(z, self.double_log)


def _export_graph(network: nn.Module, double_log: bool, tokenizer: Any, path: Path) -> None:
    net = copy.deepcopy(network).float().cpu().eval()  # the caller's network keeps its device, dtype and mode
    sample = tokenizer(
        ["a first sample text", "and a second, longer sample text to trace"], padding=True, return_tensors="pt"
    )
    args = tuple(sample[name] for name in INPUTS)
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUTS} | {OUTPUT: {0: "batch"}}
    with warnings.catch_warnings(), torch.inference_mode(False), torch.no_grad():
        warnings.simplefilter("ignore")  # TracerWarnings about shape-dependent Python branches of HF code
        try:
            torch.onnx.export(
                SpladeGraph(net, double_log),
                args,
                str(path),
                input_names=list(INPUTS),
                output_names=[OUTPUT],
                dynamic_axes=axes,
                opset_version=OPSET,
                dynamo=False,
            )
        except Exception as exc:  # the exporter raises many types; the user needs the model and the reason
            raise VtlabError(
                f"export.onnx: torch.onnx.export failed for {type(network).__name__} "
                f"({type(exc).__name__}: {' '.join(str(exc).split())[:300]})"
            ) from exc


def export_onnx(encoder: Any, out_dir: str | Path) -> Path:
    """Write the encoder's networks as ONNX graphs with SPLADE pooling, plus tokenizer and onnx.json, to `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lowercase, blank = preprocess_parts(encoder.preprocess)
    encoder.tokenizer.save_pretrained(out_dir)
    if lowercase:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(out_dir)
        _add_lowercase(tokenizer)
        tokenizer.save_pretrained(out_dir)
    sides = {"doc": "doc.onnx"}
    pad_id = encoder.tokenizer.pad_token_id if encoder.tokenizer.pad_token_id is not None else 0
    pad_token = encoder.tokenizer.convert_ids_to_tokens(pad_id)
    _export_graph(encoder.network("doc"), encoder.double_log, encoder.tokenizer, out_dir / "doc.onnx")
    if isinstance(encoder, InferenceFreeEncoder):
        sides["query"] = None  # the SparseEncoder's SparseStaticEmbedding (relu(idf) per distinct token)
    elif encoder.query_model is not None:
        _export_graph(encoder.query_model, encoder.double_log, encoder.tokenizer, out_dir / "query.onnx")
        sides["query"] = "query.onnx"
    else:
        sides["query"] = "doc.onnx"
    manifest = {
        "encoder": encoder_settings(encoder),
        "sides": sides,
        "inputs": list(INPUTS),
        "output": OUTPUT,
        "opset": OPSET,
        "graph_version": GRAPH_VERSION,
        "prompt": " " if blank else "",
        "pad_id": int(pad_id),
        "pad_token": str(pad_token),
        "pooling": "log1p(relu(max over positions with attention_mask=1 of the MLM logits))"
        + (", log1p again (double_log)" if encoder.double_log else ""),
    }
    write_json(out_dir / MANIFEST, manifest)
    log.info("export: ONNX encoder written to %s", out_dir)
    return out_dir
