"""Int8 ONNX graphs (`export.onnx_int8`) hold precision=auto's int8 quality bound on every x86 CPU by default.

ONNX Runtime's int8 GEMM on CPUs without VNNI adds each pair of uint8 x int8 products in a saturating 16-bit integer
(vpmaddubsw). The `portable` target's 7-bit weights keep every such pair within 32,767, so AVX2 computes the same exact
integer sums as a VNNI or AMX CPU, and the bound measured here holds there too. This is checked three ways on the real
SPLADE-tiny graphs: the graph's own weights (`pair_bound`), an emulation of the saturating kernel on its largest
MatMul (exact for `portable`, clipped for `vnni` on the inputs that saturate), and the agreement with fp32 vectors.
ONNX Runtime picks its kernel by the CPU's own flags (no emulated cap binds it), so the `vnni` graph's bound is
asserted only on a CPU with VNNI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import compose_config, need_module

from vtlab.export.onnx_int8 import INT16_MAX, UINT8_MAX, pair_bound, quantize_graphs
from vtlab.export.onnx_runtime import OnnxSparseEncoder
from vtlab.runtime.cpu import own_cpu_flags
from vtlab.stages.pipeline import run

pytestmark = pytest.mark.usefixtures("shared_cache")
ort = need_module("onnxruntime")
VNNI = {"avx512_vnni", "avx_vnni", "amx_int8"}


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    from vtlab.bench.encode import onnx_dir

    fp32 = onnx_dir("splade-tiny")
    out = {"fp32": fp32}
    for target in ("portable", "vnni"):
        out[target] = tmp_path_factory.mktemp(target) / "onnx-int8"
        quantize_graphs(fp32, out[target], target)
    return out


def _largest_weight(graph) -> np.ndarray:
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(graph))
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    ws = [weights[n.input[1]] for n in model.graph.node if n.op_type == "MatMulInteger" and n.input[1] in weights]
    return max(ws, key=lambda w: w.size).astype(np.int32)  # [K, N]: the vocabulary projection


def _vpmaddubsw_matmul(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """uint8 [M, K] x int8 [K, N] as an AVX2 kernel without VNNI sums it: adjacent products along K in pairs,
    each pair saturated to int16, then the pairs summed in int32."""
    k = a.shape[1] - a.shape[1] % 2
    prod = a[:, :k, None].astype(np.int32) * w[None, :k, :]  # [M, K, N]
    pairs = np.clip(prod[:, 0::2] + prod[:, 1::2], -INT16_MAX - 1, INT16_MAX)
    return pairs.sum(axis=1) + (a[:, k:].astype(np.int32) @ w[k:] if k < a.shape[1] else 0)


@pytest.mark.slow
def test_the_portable_graph_cannot_saturate_a_16_bit_pair_and_the_vnni_graph_can(graphs) -> None:
    for target, can_saturate in (("portable", False), ("vnni", True)):
        manifest = json.loads((graphs[target] / "onnx.json").read_text())["quantization"]
        assert manifest["target"] == target and manifest["reduce_range"] is (target == "portable")
        for g, recorded in manifest["pair_bound"].items():
            assert recorded == pair_bound(graphs[target] / g)
            assert (recorded > INT16_MAX) is can_saturate, (target, g, recorded)


@pytest.mark.slow
def test_an_emulated_avx2_kernel_is_exact_on_the_portable_graph_and_clips_the_vnni_one(graphs) -> None:
    rng = np.random.default_rng(0)
    for target, exact in (("portable", True), ("vnni", False)):
        w = _largest_weight(graphs[target] / "doc.onnx")[:, :512]
        # activations: random, and the worst case a quantized activation row can be (every value at 255)
        a = np.vstack([rng.integers(0, UINT8_MAX + 1, size=(3, w.shape[0])), np.full((1, w.shape[0]), UINT8_MAX)])
        same = np.array_equal(_vpmaddubsw_matmul(a.astype(np.uint8), w), a.astype(np.int64) @ w)
        assert same is exact, target


@pytest.mark.slow
@pytest.mark.parametrize("target", ["portable", "vnni"])
def test_int8_graphs_agree_with_fp32_within_the_int8_bound(graphs, target) -> None:
    if target == "vnni" and not VNNI & own_cpu_flags():  # ONNX Runtime reads cpuid: no emulated cap binds it
        pytest.skip(
            "the vnni graph's 8-bit weights saturate ONNX Runtime's 16-bit pairs on a CPU without VNNI (this one): "
            "its bound is claimed for VNNI/AMX CPUs only; the portable graph is the default"
        )
    from vtlab.bench.encode import calibration_passages
    from vtlab.runtime.precision import agreement

    docs = calibration_passages(200)
    queries = [d.split(".")[0][:80] for d in docs[:60]]
    fp32, int8 = OnnxSparseEncoder(graphs["fp32"], threads=2), OnnxSparseEncoder(graphs[target], threads=2)
    a = agreement(
        fp32.encode(queries, "query"), fp32.encode(docs, "doc"), int8.encode(queries, "query"), int8.encode(docs, "doc")
    )
    assert a.holds(), a.words()


@pytest.mark.train
def test_stage_export_onnx_int8_writes_the_portable_graphs_by_name(tmp_path) -> None:
    out = tmp_path / "st"
    cfg = compose_config(
        [
            "stage=export",
            "backbone=splade-tiny",
            "vocab=native",
            f"export.out={out}",
            f"paths.run_dir={tmp_path / 'run'}",
            "export.onnx_int8=portable",
            "data.doc_max_length=64",
            "model.encoder.precision=fp32",
        ]
    )
    run(cfg)
    q = json.loads((out / "onnx-int8" / "onnx.json").read_text())["quantization"]
    assert q["target"] == "portable" and q["reduce_range"] is True and "every x86 CPU" in q["exact_on"]
    assert (out / "onnx" / "onnx.json").is_file()  # the fp32 graphs it was made from, beside it
    vec = OnnxSparseEncoder(out / "onnx-int8").encode(["what is splade"], "query")
    assert vec.nnz > 0
