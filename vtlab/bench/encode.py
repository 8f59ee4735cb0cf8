"""Encoding benchmark worker: one tool, one model, the bench's passages then its questions, in this (fresh) process.

    python -m vtlab.bench.encode --tool vtlab|vtlab-bf16|vtlab-int8|st|onnx|onnx-int8|floor
                                 --model splade-tiny|minilm --texts FILE --out FILE [--graphs DIR] [--vectors DIR]
                                 [--docs N] [--queries N] [--splits N,M]

The texts are the parent's texts file (write_texts: the passages and questions of the testbed's four evaluation sets,
vtlab/bench/testbed.py), encoded at 256 / 64 tokens, batch 64.

- `vtlab`: SpladeEncoder.encode (precision=fp32); `vtlab-bf16`: the same with precision=bf16 (bf16 autocast);
  `vtlab-int8`: precision=int8 (vtlab.runtime.quantize; the int8 copy of the network is built in the warm-up, untimed).
- `onnx`: ONNX Runtime on the graphs `export.onnx=true` writes (SPLADE pooling inside), through
  vtlab.export.onnx_runtime.OnnxSparseEncoder: no torch in the process, tokenizers + onnxruntime only.
  `onnx-int8`: the same graphs after ONNX Runtime's dynamic int8 quantization (export.onnx_int8's), same worker path.
- `st`: sentence-transformers SparseEncoder = MLMTransformer (fill-mask) + SpladePooling(max, relu), its own encode().
- `floor`: what an encoder that computes the logits with torch's GEMM cannot skip, on vtlab's batches: tokenization,
  the encoder body + MLM head transform, and the vocabulary matmul on the real (non-pad) tokens only, into one reused
  buffer; no pooling, no output. Where a fused pooling kernel runs (vtlab.runtime.fused: it never writes the logits),
  vtlab can run below it.
The vtlab rows and the floor run with the allocator settings `python -m vtlab` makes (vtlab.runtime.allocator); the
peers with their own defaults.

--splits N,M: the texts are encoded in consecutive slices [0, N), [N, M), [M, end), each timed, so the result holds
the timing of every prefix (`prefix`) beside the whole: a row that encodes only a sample is compared with this one on
the same texts. Peak RSS is this process's (VmHWM); vectors go to --vectors as CSR .npz for the parent's checks.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from vtlab.bench.common import peak_rss_mb, rss_mb, set_threads, timed, write_result
from vtlab.core.assets import asset_path, cache_dir
from vtlab.core.atomic import build_dir
from vtlab.core.choices import OnnxInt8Target
from vtlab.core.json_files import read_json
from vtlab.data.boolq import boolq_collection

# torch-free; onnxruntime is imported only when used
from vtlab.export.onnx_int8 import QUANTIZATION_VERSION, quantize_graphs
from vtlab.export.onnx_runtime import GRAPH_VERSION, MANIFEST, OnnxSparseEncoder
from vtlab.runtime.allocator import keep_freed_memory

# vtlab.backbones, vtlab.models.* and vtlab.export.onnx are imported where used: they load torch (and vtlab's encoder)
# into a process, and the `st` and `onnx` rows must measure their peer without them (the onnx rows without torch).

DOC_LEN, QUERY_LEN = 256, 64
SIDES = (("doc", DOC_LEN), ("query", QUERY_LEN))
VTLAB_TOOLS = {"vtlab": "fp32", "vtlab-bf16": "bf16", "vtlab-int8": "int8"}  # tool → model.encoder.precision
ONNX_TOOLS = ("onnx", "onnx-int8")
# A tool's encode after its set-up and warm-up: (texts, side) → CSR rows (None: the floor keeps no output).
Encode = Callable[[Sequence[str], str], "sp.csr_matrix | None"]


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
            _, ids, mask = next(enc.batches(calibration_passages(64), "doc", 64))
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
    if not (out / MANIFEST).is_file():
        from vtlab.backbones import Backbone
        from vtlab.export.onnx import export_onnx
        from vtlab.models.encoder import SpladeEncoder

        enc = SpladeEncoder.from_backbone(
            Backbone(str(model_dir(name)), family="bert"), query_max_length=QUERY_LEN, doc_max_length=DOC_LEN
        )
        build_dir(out, lambda tmp: export_onnx(enc, tmp), lambda d: (d / MANIFEST).is_file(), disk_errors=False)
    return out


def onnx_int8_dir(name: str, target: OnnxInt8Target) -> Path:
    """onnx_dir(name) quantized for `target` by vtlab.export.onnx_int8.quantize_graphs, written once into the cache
    beside it."""
    src = onnx_dir(name)
    out = src.with_name(f"{src.name}-int8-{target}-q{QUANTIZATION_VERSION}")
    if not (out / MANIFEST).is_file():
        build_dir(
            out, lambda tmp: quantize_graphs(src, tmp, target), lambda d: (d / MANIFEST).is_file(), disk_errors=False
        )
    return out


def calibration_passages(n: int) -> list[str]:
    """The first n BoolQ validation passages: what MiniLM's head bias is set on (model_dir), not what is timed."""
    return list(boolq_collection("validation").corpus.values())[:n]


def write_texts(path: Path, sets: dict[str, Any]) -> dict[str, Any]:
    """The texts file the workers encode: the collections' passages and questions, set after set (vtlab.bench.testbed
    reads the vectors in this order), with each set's name and size; returns what it wrote."""
    texts: dict[str, Any] = {"sets": [], "docs": [], "queries": []}
    for name, c in sets.items():
        texts["sets"].append({"name": name, "docs": len(c.corpus), "queries": len(c.queries)})
        texts["docs"] += list(c.corpus.values())
        texts["queries"] += list(c.queries.values())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(texts) + "\n")
    return texts


def read_texts(path: str | Path, docs: int | None = None, queries: int | None = None) -> tuple[list[str], list[str]]:
    """The first `docs` passages and `queries` questions (None: all) of a write_texts file."""
    texts = read_json(path, what="a write_texts file: docs, queries")
    return texts["docs"][:docs], texts["queries"][:queries]


def torch_sparse_to_csr(t: Any) -> sp.csr_matrix:
    t = t.coalesce().cpu()
    idx = t.indices().numpy()
    return sp.csr_matrix((t.values().float().numpy(), (idx[0], idx[1])), shape=tuple(t.shape))


# ------------------------------------------------------------------------------- the tools: set-up + warm-up → Encode


def setup_vtlab(path: Path, warm: list[str], batch: int, precision: str) -> Encode:
    from vtlab.backbones import Backbone
    from vtlab.models.encoder import SpladeEncoder

    keep_freed_memory()  # as `python -m vtlab` runs (vtlab.runtime.allocator)
    enc = SpladeEncoder.from_backbone(
        Backbone(str(path), family="bert"), query_max_length=QUERY_LEN, doc_max_length=DOC_LEN, precision=precision
    )

    def encode(items: Sequence[str], side: str) -> sp.csr_matrix:
        return enc.encode(list(items), side, batch_size=batch, show_progress=False)

    encode(warm, "doc")  # warm-up: one-time allocations, oneDNN primitives, int8's quantized copy
    return encode


def auto_choice(path: Path) -> dict[str, str]:
    """What precision=auto runs for this model on this machine and why: its check (timing and agreement with fp32 on
    BoolQ train pairs, vtlab.runtime.precision) run here, after the timed encoding, or read from the cache of a
    previous run on this machine."""
    from vtlab.backbones import Backbone
    from vtlab.data.boolq import probe_texts
    from vtlab.models.encoder import SpladeEncoder

    enc = SpladeEncoder.from_backbone(Backbone(str(path), family="bert"), precision="auto", probe=probe_texts)
    choice = enc.auto_choice()
    return {"precision": choice.precision, "reason": choice.reason}


def setup_st(path: Path, warm: list[str], batch: int) -> Encode:
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
    lengths = dict(SIDES)

    def encode(items: Sequence[str], side: str) -> sp.csr_matrix:
        model.max_seq_length = lengths[side]
        emb = model.encode(list(items), batch_size=batch, show_progress_bar=False, convert_to_sparse_tensor=True)
        return torch_sparse_to_csr(emb)

    encode(warm, "doc")  # warm-up, as for vtlab
    return encode


def setup_onnx(graphs: Path, warm: list[str], batch: int, threads: int) -> Encode:
    enc = OnnxSparseEncoder(graphs, threads=threads)

    def encode(items: Sequence[str], side: str) -> sp.csr_matrix:
        return enc.encode(items, side, batch_size=batch)

    encode(warm, "doc")  # warm-up, as for the others
    return encode


def setup_floor(path: Path, warm: list[str], batch: int) -> Encode:
    """Tokenize + body + head transform + decoder GEMM over real tokens, on the batches vtlab's encode forms."""
    import torch

    from vtlab.backbones import Backbone, decoder_bypassed
    from vtlab.models.encoder import SpladeEncoder
    from vtlab.runtime.body import head_inputs
    from vtlab.runtime.pooling import DEFAULT_CHUNK_BYTES, tile_shape

    keep_freed_memory()  # the body as vtlab runs it: its allocator settings and chunks (head_inputs)
    enc = SpladeEncoder.from_backbone(
        Backbone(str(path), family="bert"), query_max_length=QUERY_LEN, doc_max_length=DOC_LEN
    )
    enc.eval()
    net = enc.model
    # the GEMM in the same cache-sized tiles vtlab uses (rows of real tokens × vocabulary columns), output discarded
    rows, _, cols = tile_shape(1, enc.vocab_size, 4, DEFAULT_CHUNK_BYTES)
    buf = torch.empty(rows * cols)

    @torch.inference_mode()
    def encode(items: Sequence[str], side: str) -> None:
        with decoder_bypassed(net) as decoder:
            w = decoder.weight
            V = w.shape[0]
            for _, ids, mask in enc.batches(list(items), side, batch):  # the same tokenization + length-sorted batches
                hidden = head_inputs(net, ids, mask)
                real = hidden[mask.bool()]  # [tokens, H]
                for s in range(0, real.shape[0], rows):
                    part = real[s : s + rows]
                    for v0 in range(0, V, cols):
                        v1 = min(v0 + cols, V)
                        torch.mm(part, w[v0:v1].t(), out=buf[: part.shape[0] * (v1 - v0)].view(-1, v1 - v0))

    encode(warm, "doc")  # warm-up
    return encode


def setup(args: argparse.Namespace, warm: list[str]) -> Encode:
    """The tool's Encode, through a table: tool → its set-up."""
    path = model_dir(args.model)
    setups: dict[str, Callable[[], Encode]] = {
        **{t: partial(setup_vtlab, path, warm, args.batch, p) for t, p in VTLAB_TOOLS.items()},
        **{t: partial(setup_onnx, Path(args.graphs or "."), warm, args.batch, args.threads) for t in ONNX_TOOLS},
        "st": partial(setup_st, path, warm, args.batch),
        "floor": partial(setup_floor, path, warm, args.batch),
    }
    return setups[args.tool]()


def timing(n: int, wall_s: float, cpu_s: float) -> dict[str, Any]:
    return {"n": n, "wall_s": round(wall_s, 3), "cpu_s": round(cpu_s, 3), "per_s": round(n / max(wall_s, 1e-9), 2)}


def measure(encode: Encode, items: list[str], side: str, splits: Sequence[int]) -> tuple[dict[str, Any], Any]:
    """Encode `items` in the slices `splits` cut (each timed); the whole's timing, each prefix's, and the rows."""
    bounds = [*sorted({b for b in splits if 0 < b < len(items)}), len(items)]
    rows, wall, cpu, prefix, start = [], 0.0, 0.0, {}, 0
    for end in bounds:
        with timed() as t:
            rows.append(encode(items[start:end], side))
        wall, cpu, start = wall + t.wall_s, cpu + t.cpu_s, end
        prefix[str(end)] = timing(end, wall, cpu)
    result = {**timing(len(items), wall, cpu), "prefix": {k: v for k, v in prefix.items() if int(k) < len(items)}}
    return result, (None if rows[0] is None else sp.vstack(rows, format="csr"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", required=True, choices=[*VTLAB_TOOLS, *ONNX_TOOLS, "st", "floor"])
    ap.add_argument("--model", default="splade-tiny", choices=["splade-tiny", "minilm"])
    ap.add_argument("--texts", required=True, help="the parent's texts file (write_texts)")
    ap.add_argument("--graphs", default=None, help="the ONNX directory the onnx tools run (onnx_dir, onnx_int8_dir)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--docs", type=int, default=None, help="the first N passages only (default: all)")
    ap.add_argument("--queries", type=int, default=None, help="the first N questions only (default: all)")
    ap.add_argument("--splits", default="", help="comma-separated prefix sizes timed on their own, e.g. 256,500")
    ap.add_argument("--vectors", default=None, help="directory for the output vectors (.npz)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.tool in ONNX_TOOLS and not (args.graphs and (Path(args.graphs) / MANIFEST).is_file()):
        ap.error(f"--tool {args.tool} needs --graphs DIR, a directory with {MANIFEST} (got {args.graphs!r})")
    try:
        splits = [int(s) for s in args.splits.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--splits {args.splits!r}: expected comma-separated integers")
    set_threads(args.threads, torch_threads=args.tool not in ONNX_TOOLS)
    docs, queries = read_texts(args.texts, args.docs, args.queries)
    encode = setup(args, docs[: args.batch])
    result: dict[str, Any] = {"rss_after_load_mb": round(rss_mb(), 1)}
    vectors = {}
    for side, _ in SIDES:
        result[side], vectors[side] = measure(encode, docs if side == "doc" else queries, side, splits)
    if args.vectors and vectors["doc"] is not None:
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
        peak_rss_mb=round(peak_rss_mb(), 1),  # before auto's check below, which loads more precisions
        torch_loaded="torch" in sys.modules,
    )
    if args.tool in VTLAB_TOOLS:
        from vtlab.runtime.fused import in_use

        # the fused kernel that pooled here, after this process's own choice (int8: the faster of its rivals)
        result["pooling_kernel"] = in_use()[VTLAB_TOOLS[args.tool]]
    if args.tool == "vtlab":
        result["auto"] = auto_choice(model_dir(args.model))
    write_result(args.out, result)


if __name__ == "__main__":
    main()
