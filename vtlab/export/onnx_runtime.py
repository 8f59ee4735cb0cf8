"""Encoding with an `export.onnx=true` directory through ONNX Runtime, without torch or transformers (what a serving
process needs: onnxruntime, the tokenizers library, numpy/scipy). The graphs and onnx.json are written by
vtlab.export.onnx.export_onnx."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from vtlab.core.errors import VtlabError
from vtlab.core.json_files import read_json

MANIFEST = "onnx.json"
INPUTS = ("input_ids", "attention_mask")
OUTPUT = "sparse_embedding"
# The graph layout export_onnx writes (recorded in onnx.json; part of cache keys of exports). 2: pads masked in the
# hidden states and the bias added after the max, so ORT passes over the [batch, length, vocabulary] logits once.
GRAPH_VERSION = 2


def onnxruntime_module() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise VtlabError(
            "ONNX: the onnxruntime package is not installed (pip install -e '.[onnx]'), or set export.onnx=false"
        ) from None
    return onnxruntime


class OnnxSparseEncoder:
    """Encode texts with an export_onnx directory: a float32 CSR [n, vocab], the rows SpladeEncoder.encode gives."""

    def __init__(self, path: str | Path, threads: int | None = None) -> None:
        from tokenizers import Tokenizer

        ort = onnxruntime_module()
        self.path = Path(path)
        if not (self.path / MANIFEST).is_file():
            raise VtlabError(f"{self.path}: no {MANIFEST} (not a directory written by export.onnx=true)")
        self.manifest = read_json(self.path / MANIFEST, dict, "the manifest export.onnx=true writes")
        try:
            self.max_length = {str(k): int(v) for k, v in self.manifest["encoder"]["max_length"].items()}
            self.vocab_size = int(self.manifest["encoder"]["vocab_size"])
            pad_id, pad_token = int(self.manifest["pad_id"]), str(self.manifest["pad_token"])
            graphs = list(dict.fromkeys(n for n in self.manifest["sides"].values() if n is not None))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise VtlabError(
                f"{self.path / MANIFEST}: not the manifest export.onnx=true writes ({type(e).__name__}: {e}); "
                "export the model again"
            ) from None
        for name in graphs:
            if not isinstance(name, str) or Path(name).name != name or not (self.path / name).is_file():
                raise VtlabError(f"{self.path / MANIFEST}: names the graph {name!r}, which is no file in {self.path}")
        self.tokenizer = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        self.tokenizer.no_truncation()
        self.tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token)
        options = ort.SessionOptions()
        # the graph materializes [batch, length, vocabulary] logits; ORT's arena would keep such blocks of every
        # batch shape (SPLADE-tiny, 64 passages of 120-256 tokens: peak RSS 4.4 GB with the arena, 2.2 GB without)
        options.enable_cpu_mem_arena = False
        if threads:
            options.intra_op_num_threads = int(threads)
            options.inter_op_num_threads = 1
        self.sessions = {
            name: ort.InferenceSession(str(self.path / name), options, providers=["CPUExecutionProvider"])
            for name in graphs
        }

    def features(self, texts: Sequence[str], side: str) -> dict[str, np.ndarray]:
        """input_ids and attention_mask as the exporting tokenizer makes them (truncated to the side's length)."""
        self.tokenizer.enable_truncation(self.max_length[side])
        prompt = self.manifest.get("prompt", "")
        encodings = self.tokenizer.encode_batch([prompt + t for t in texts])
        return {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        }

    def encode(self, texts: Sequence[str], side: str = "doc", batch_size: int = 64) -> sp.csr_matrix:
        name = self.manifest["sides"].get(side)
        if name is None:
            raise VtlabError(
                f"{self.path}: no ONNX graph for side={side!r} (an inference-free model's queries are "
                "weighted by the SparseEncoder's static table)"
            )
        session = self.sessions[name]
        # longest texts first (as sentence-transformers and vtlab batch): similar lengths share a batch, less padding
        order = np.argsort([-len(t) for t in texts], kind="stable")
        rows = [
            sp.csr_matrix(
                session.run([OUTPUT], self.features([texts[i] for i in order[s : s + batch_size]], side))[0],
                dtype=np.float32,
            )
            for s in range(0, len(texts), batch_size)
        ]
        if not rows:
            return sp.csr_matrix((0, self.vocab_size), dtype=np.float32)
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return sp.vstack(rows, format="csr")[inverse]
