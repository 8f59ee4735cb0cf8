"""Encoding benchmark worker: one tool, one model, BoolQ-val passages then questions, in this (fresh) process.

    python -m vtlab.bench.encode --tool vtlab|vtlab-bf16|vtlab-int8|st|onnx|floor --model splade-tiny|minilm
                                 --out FILE [--vectors DIR]

- `vtlab`: SpladeEncoder.encode (precision=fp32); `vtlab-bf16`: the same with precision=bf16 (bf16 autocast);
  `vtlab-int8`: precision=int8 (vtlab.models.quantize; the int8 copy of the network is built in the warm-up, untimed).
- `onnx`: ONNX Runtime on the graphs `export.onnx=true` writes (SPLADE pooling inside), through
  vtlab.export.onnx_runtime.OnnxSparseEncoder: no torch in the process, tokenizers + onnxruntime only.
- `st`: sentence-transformers SparseEncoder = MLMTransformer (fill-mask) + SpladePooling(max, relu), its own encode().
- `floor`: what no SPLADE encoder can skip, on vtlab's batches: tokenization, the encoder body + MLM head transform,
  and the vocabulary matmul on the real (non-pad) tokens only, into one reused buffer; no pooling, no output.

Peak RSS is this process's (ru_maxrss); vectors go to --vectors as CSR .npz for the parent's equality check.
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from vtlab.assets import asset_path, cache_dir
from vtlab.atomic import build_dir
from vtlab.bench.common import peak_rss_mb, rss_mb, set_threads, timed, write_result
from vtlab.data.boolq import boolq_collection

# torch-free; onnxruntime is imported only when used
from vtlab.export.onnx_runtime import GRAPH_VERSION, OnnxSparseEncoder

# vtlab.backbones, vtlab.models.* and vtlab.export.onnx are imported where used: they load torch (and vtlab's encoder)
# into a process, and the `st` and `onnx` rows must measure their peer without them (the onnx row without torch).

DOC_LEN, QUERY_LEN = 256, 64
SIDES = (("doc", DOC_LEN), ("query", QUERY_LEN))
VTLAB_TOOLS = {"vtlab": "fp32", "vtlab-bf16": "bf16", "vtlab-int8": "int8"}  # tool → model.encoder.precision


def model_dir(name: str) -> Path:
    """A masked-LM directory both tools load. MiniLM has no MLM head: one is initialized once (seed 0), its output
    bias shifted so that a passage has ~186 active terms as with SPLADE-tiny (a random head would make every vector
    dense, and the bench would measure 30k-term outputs instead of SPLADE), and saved, so every tool sees the same
    weights."""
    if name == "splade-tiny":
        return asset_path("splade-tiny")
    if name != "minilm":
        raise ValueError(f"unknown bench model {name!r}")
    out = cache_dir("bench") / "minilm-mlm-seed0-186"
    if not (out / "model.safetensors").is_file():
        import torch

        from vtlab.backbones import Backbone
        from vtlab.models.encoder import SpladeEncoder

        torch.manual_seed(0)
        backbone = Backbone("asset:minilm", family="bert")
        enc = SpladeEncoder(backbone.load_model(), backbone.load_tokenizer(), doc_max_length=DOC_LEN)
        with torch.inference_mode():
            _, ids, mask = next(enc.batches(texts(64, 0)[0], "doc", 64))
            z = enc.max_logits(ids, mask, "doc")
            cut = torch.quantile(z.flatten()[:: max(1, z.numel() // 2**24)], 1 - 186 / z.shape[1])
            enc.output_bias("doc").sub_(cut)

        def write(tmp: Path) -> None:
            enc.model.save_pretrained(tmp)
            enc.tokenizer.save_pretrained(tmp)

        build_dir(out, write, lambda d: (d / "model.safetensors").is_file(), disk_errors=False)
    return out


def onnx_dir(name: str) -> Path:
    """The ONNX export of a bench model (export_onnx at the bench's lengths), written once into the cache."""
    out = cache_dir("bench") / f"onnx-{name}-q{QUERY_LEN}-d{DOC_LEN}-g{GRAPH_VERSION}"
    if not (out / "onnx.json").is_file():
        from vtlab.backbones import Backbone
        from vtlab.export.onnx import export_onnx
        from vtlab.models.encoder import SpladeEncoder

        enc = SpladeEncoder.from_backbone(
            Backbone(str(model_dir(name)), family="bert"), query_max_length=QUERY_LEN, doc_max_length=DOC_LEN
        )
        build_dir(out, lambda tmp: export_onnx(enc, tmp), lambda d: (d / "onnx.json").is_file(), disk_errors=False)
    return out


def texts(limit_docs: int | None = None, limit_queries: int | None = None) -> tuple[list[str], list[str]]:
    """BoolQ validation passages (2,938) and questions (3,270), in collection order."""
    c = boolq_collection("validation")
    return list(c.corpus.values())[:limit_docs], list(c.queries.values())[:limit_queries]


def torch_sparse_to_csr(t: Any) -> sp.csr_matrix:
    t = t.coalesce().cpu()
    idx = t.indices().numpy()
    return sp.csr_matrix((t.values().float().numpy(), (idx[0], idx[1])), shape=tuple(t.shape))


# ---------------------------------------------------------------------------------------------------- the tools


def run_vtlab(path: Path, docs: list[str], queries: list[str], batch: int, precision: str) -> dict[str, Any]:
    from vtlab.backbones import Backbone
    from vtlab.models.encoder import SpladeEncoder

    enc = SpladeEncoder.from_backbone(
        Backbone(str(path), family="bert"), query_max_length=QUERY_LEN, doc_max_length=DOC_LEN, precision=precision
    )
    result: dict[str, Any] = {"rss_after_load_mb": round(rss_mb(), 1)}
    enc.encode(docs[:batch], "doc", batch_size=batch, show_progress=False)  # warm-up: one-time allocations, oneDNN
    vectors = {}
    for side, _ in SIDES:
        items = docs if side == "doc" else queries
        with timed() as t:
            vectors[side] = enc.encode(items, side, batch_size=batch, show_progress=False)
        result[side] = {
            "n": len(items),
            "wall_s": round(t.wall_s, 3),
            "cpu_s": round(t.cpu_s, 3),
            "per_s": round(len(items) / t.wall_s, 2),
        }
    return {**result, "_vectors": vectors}


def run_st(path: Path, docs: list[str], queries: list[str], batch: int) -> dict[str, Any]:
    from sentence_transformers import SparseEncoder
    from sentence_transformers.sparse_encoder.modules.mlm_transformer import MLMTransformer
    from sentence_transformers.sparse_encoder.modules.splade_pooling import SpladePooling

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.getLogger("sentence_transformers").setLevel(logging.ERROR)
        mlm = MLMTransformer(str(path), max_seq_length=DOC_LEN)
        model = SparseEncoder(
            modules=[mlm, SpladePooling(pooling_strategy="max", activation_function="relu")], device="cpu"
        )
    model.eval()
    result: dict[str, Any] = {"rss_after_load_mb": round(rss_mb(), 1)}
    model.encode(docs[:batch], batch_size=batch, show_progress_bar=False)  # warm-up, as for vtlab
    vectors = {}
    for side, max_len in SIDES:
        items = docs if side == "doc" else queries
        model.max_seq_length = max_len
        with timed() as t:
            emb = model.encode(items, batch_size=batch, show_progress_bar=False, convert_to_sparse_tensor=True)
        vectors[side] = torch_sparse_to_csr(emb)
        result[side] = {
            "n": len(items),
            "wall_s": round(t.wall_s, 3),
            "cpu_s": round(t.cpu_s, 3),
            "per_s": round(len(items) / t.wall_s, 2),
        }
    return {**result, "_vectors": vectors}


def run_onnx(path: Path, docs: list[str], queries: list[str], batch: int, threads: int) -> dict[str, Any]:
    enc = OnnxSparseEncoder(path, threads=threads)
    result: dict[str, Any] = {"rss_after_load_mb": round(rss_mb(), 1)}
    enc.encode(docs[:batch], "doc", batch_size=batch)  # warm-up, as for the others
    vectors = {}
    for side, _ in SIDES:
        items = docs if side == "doc" else queries
        with timed() as t:
            vectors[side] = enc.encode(items, side, batch_size=batch)
        result[side] = {
            "n": len(items),
            "wall_s": round(t.wall_s, 3),
            "cpu_s": round(t.cpu_s, 3),
            "per_s": round(len(items) / t.wall_s, 2),
        }
    return {**result, "_vectors": vectors}


def run_floor(path: Path, docs: list[str], queries: list[str], batch: int) -> dict[str, Any]:
    """Tokenize + body + head transform + decoder GEMM over real tokens, on the batches vtlab's encode forms."""
    import torch

    from vtlab.backbones import Backbone, decoder_bypassed
    from vtlab.models.encoder import SpladeEncoder
    from vtlab.models.pooling import DEFAULT_CHUNK_BYTES, tile_shape

    enc = SpladeEncoder.from_backbone(
        Backbone(str(path), family="bert"), query_max_length=QUERY_LEN, doc_max_length=DOC_LEN
    )
    enc.eval()
    net = enc.model
    result: dict[str, Any] = {"rss_after_load_mb": round(rss_mb(), 1)}
    # the GEMM in the same cache-sized tiles vtlab uses (rows of real tokens × vocabulary columns), output discarded
    rows, _, cols = tile_shape(1, enc.vocab_size, 4, DEFAULT_CHUNK_BYTES)
    with decoder_bypassed(net) as decoder:
        w = decoder.weight
        V = w.shape[0]
        buf = torch.empty(rows * cols)

        def one_pass(items: list[str], side: str) -> None:
            for _, ids, mask in enc.batches(items, side, batch):  # the same tokenization + length-sorted batches
                hidden = net(input_ids=ids, attention_mask=mask).logits
                real = hidden[mask.bool()]  # [tokens, H]
                for s in range(0, real.shape[0], rows):
                    part = real[s : s + rows]
                    for v0 in range(0, V, cols):
                        v1 = min(v0 + cols, V)
                        torch.mm(part, w[v0:v1].t(), out=buf[: part.shape[0] * (v1 - v0)].view(-1, v1 - v0))

        with torch.inference_mode():
            one_pass(docs[:batch], "doc")  # warm-up
            for side, _ in SIDES:
                items = docs if side == "doc" else queries
                with timed() as t:
                    one_pass(items, side)
                result[side] = {
                    "n": len(items),
                    "wall_s": round(t.wall_s, 3),
                    "cpu_s": round(t.cpu_s, 3),
                    "per_s": round(len(items) / t.wall_s, 2),
                }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", required=True, choices=[*VTLAB_TOOLS, "st", "onnx", "floor"])
    ap.add_argument("--model", default="splade-tiny", choices=["splade-tiny", "minilm"])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--docs", type=int, default=None, help="first N passages only (default: all 2,938)")
    ap.add_argument("--queries", type=int, default=None, help="first N questions only (default: all 3,270)")
    ap.add_argument("--vectors", default=None, help="directory for the output vectors (.npz)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    set_threads(args.threads, torch_threads=args.tool != "onnx")
    path = model_dir(args.model)
    docs, queries = texts(args.docs, args.queries)
    if args.tool == "st":
        result = run_st(path, docs, queries, args.batch)
    elif args.tool == "floor":
        result = run_floor(path, docs, queries, args.batch)
    elif args.tool == "onnx":
        result = run_onnx(onnx_dir(args.model), docs, queries, args.batch, args.threads)
    else:
        result = run_vtlab(path, docs, queries, args.batch, VTLAB_TOOLS[args.tool])
    vectors = result.pop("_vectors", {})
    if args.vectors and vectors:
        d = Path(args.vectors)
        d.mkdir(parents=True, exist_ok=True)
        for side, m in vectors.items():
            sp.save_npz(d / f"{args.tool}-{args.model}-{side}.npz", sp.csr_matrix(m, dtype=np.float32))
            result[side]["nnz_per_row"] = round(m.nnz / max(m.shape[0], 1), 1)
    result.update(
        tool=args.tool,
        model=args.model,
        batch=args.batch,
        threads=args.threads,
        peak_rss_mb=round(peak_rss_mb(), 1),
        torch_loaded="torch" in sys.modules,
    )
    write_result(args.out, result)


if __name__ == "__main__":
    main()
