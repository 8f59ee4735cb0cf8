"""Int8 ONNX graphs (`export.onnx_int8=portable|vnni`): an export_onnx directory through ONNX Runtime's dynamic
quantization, with the target it was made for and the bound that makes it hold recorded in its onnx.json.

ONNX Runtime's x86 int8 GEMMs multiply uint8 activations (0..255, quantized per batch) by int8 weights. With VNNI
(avx512_vnni, avx_vnni) or AMX the products are summed in 32 bits, exactly. Without VNNI (AVX2, AVX-512 without VNNI)
they run on vpmaddubsw, which adds each pair of products into a saturating 16-bit integer: 255 * (|w1| + |w2|) above
32,767 is clipped, and a graph with full 8-bit weights loses quality there (SPLADE-tiny's doc cosine to fp32 fell to
0.985 on an AVX2-only EPYC, under the 0.99 that precision=auto demands of int8). An export is often run on another
machine than the one that made it, so the default target does not depend on this CPU:

- `portable`: 7-bit weights (`reduce_range`, -64..63). No pair can exceed 255 * 128 = 32,640, so every x86 CPU
  computes the same exact integer sums, with or without VNNI.
- `vnni`: full 8-bit weights, a little closer to fp32 on CPUs with VNNI or AMX only; the user names the target.

`pair_bound` reads the largest 255 * (|w1| + |w2|) any two weights of one output column can give, from the graph
itself: at most 32,767 means no pairing of the weights (the kernel's packing decides which two meet) can saturate.
Only MatMuls with a constant weight are quantized (the body's Linear layers and the vocabulary projection);
attention's activation x activation MatMuls stay fp32.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vtlab.core.atomic import write_json
from vtlab.core.choices import OnnxInt8Target
from vtlab.core.json_files import read_json
from vtlab.export.onnx_runtime import MANIFEST

QUANTIZATION_VERSION = 1  # bump when quantize_graphs' settings change: cached int8 graphs are named by it
INT16_MAX = 32767
UINT8_MAX = 255


@dataclass(frozen=True)
class Int8Target:
    """How the weights are quantized for one target, and where its graphs compute exactly what was checked."""

    reduce_range: bool
    exact_on: str


TARGETS: dict[OnnxInt8Target, Int8Target] = {
    "portable": Int8Target(reduce_range=True, exact_on="every x86 CPU (AVX2, AVX-512, VNNI, AMX)"),
    "vnni": Int8Target(reduce_range=False, exact_on="x86 CPUs with avx512_vnni, avx_vnni or amx_int8 only"),
}


def pair_bound(graph: str | Path) -> int:
    """The largest 255 * (|w1| + |w2|) over any two int8 weights of one output column of the graph's quantized
    MatMuls (MatMulInteger's constant B): the most a 16-bit pairwise sum of uint8 x int8 products can reach."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(graph))
    weights = {t.name: t for t in model.graph.initializer}
    bound = 0
    for node in model.graph.node:
        if node.op_type != "MatMulInteger" or node.input[1] not in weights:
            continue
        w = np.abs(numpy_helper.to_array(weights[node.input[1]]).astype(np.int32))  # [K, N]
        top2 = np.sort(w, axis=0)[-2:].sum(axis=0) if w.shape[0] > 1 else w.max(axis=0)
        bound = max(bound, int(top2.max()) * UINT8_MAX)
    return bound


def quantize_graphs(src: Path, dst: Path, target: OnnxInt8Target) -> None:
    """Every graph of an export_onnx directory `src` through onnxruntime.quantization.quantize_dynamic into `dst` (the
    other files copied); onnx.json, written last, records the target, its settings and each graph's `pair_bound`.

    The settings are ONNX Runtime's for transformers on x86 CPUs: activations quantized per batch as uint8 by the
    runtime, weights QInt8 per output channel (U8S8, the format its x86 int8 GEMMs run fastest), `reduce_range` as the
    target says."""
    import onnxruntime
    from onnxruntime.quantization import QuantType, quantize_dynamic

    spec = TARGETS[target]
    manifest = read_json(src / MANIFEST, what="export_onnx's manifest")
    graphs = sorted({g for g in manifest["sides"].values() if g is not None})
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name not in graphs and f.name != MANIFEST:
            shutil.copy2(f, dst / f.name)
    settings: dict[str, Any] = {"weight_type": "QInt8", "per_channel": True, "op_types": ["MatMul"]}
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # quantize_dynamic logs a hint to pre-process the graph (shape inference) at WARNING
    try:
        for g in graphs:
            quantize_dynamic(
                src / g,
                dst / g,
                op_types_to_quantize=settings["op_types"],
                per_channel=True,
                reduce_range=spec.reduce_range,
                weight_type=QuantType.QInt8,
                extra_options={"MatMulConstBOnly": True},
            )
    finally:
        root.setLevel(level)
    manifest["quantization"] = {
        "method": "onnxruntime.quantization.quantize_dynamic",
        "version": QUANTIZATION_VERSION,
        "onnxruntime": onnxruntime.__version__,
        "target": target,
        **settings,
        **asdict(spec),
        "pair_bound": {g: pair_bound(dst / g) for g in graphs},
        "int16_max": INT16_MAX,
    }
    write_json(dst / MANIFEST, manifest)
