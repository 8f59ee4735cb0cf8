"""ONNX export: ONNX Runtime's vectors equal vtlab's own encoder to 1e-4 on the real SPLADE-tiny (both sides, texts of
different lengths in one padded batch), the graph computes the SPLADE pooling formula written out here on the Hugging
Face logits, and `stage=export export.onnx=true` puts the graphs (+ model card) in the SparseEncoder directory."""

import json

import numpy as np
import pytest
import torch
from helpers import compose_config, need_module

from vtlab.backbones import Backbone, TinyModernBert, TinyRoberta
from vtlab.core.errors import VtlabError
from vtlab.export.onnx import export_onnx
from vtlab.export.onnx_runtime import GRAPH_VERSION, OnnxSparseEncoder
from vtlab.models.encoder import SpladeEncoder
from vtlab.stages.pipeline import run, run_or_exit

pytestmark = pytest.mark.usefixtures("shared_cache")

ort = need_module("onnxruntime")

TOL = 1e-4
DOCS = [
    "Vocabulary transfer moves a pretrained encoder onto a new tokenizer.",
    "short",
    "",
    "is [SEP] the the [MASK] same same same",
    " ".join(f"word{i} about retrieval" for i in range(120)),
]  # longer than doc_max_length: truncated
QUERIES = ["what is splade", "does vocabulary transfer keep retrieval quality?", "a"]


def read_back(
    onnx: OnnxSparseEncoder, enc: SpladeEncoder, texts: list[str], side: str = "doc", batch_size: int = 64
) -> tuple[np.ndarray, np.ndarray]:
    """`texts` encoded by ONNX Runtime on the exported graphs and by vtlab's encoder, each in batches of
    `batch_size`: (theirs, ours), dense."""
    theirs = onnx.encode(texts, side, batch_size=batch_size).toarray()
    ours = enc.encode(texts, side, batch_size=batch_size, show_progress=False).toarray()
    return theirs, ours


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    b = Backbone("asset:splade-tiny")
    enc = SpladeEncoder(b.load_model(), b.load_tokenizer(), query_max_length=16, doc_max_length=64, precision="fp32")
    out = export_onnx(enc, tmp_path_factory.mktemp("onnx") / "onnx")
    return enc, out


@pytest.mark.slow
def test_onnx_runtime_vectors_equal_vtlab_encoder(exported):
    enc, out = exported
    onnx = OnnxSparseEncoder(out, threads=2)
    for side, texts in (("doc", DOCS), ("query", QUERIES)):
        theirs, ours = read_back(onnx, enc, texts, side, batch_size=8)  # one padded batch: pads must not leak in
        assert theirs.shape == ours.shape == (len(texts), enc.vocab_size)
        assert np.abs(theirs - ours).max() <= TOL, side
        assert (ours > 0).sum() > 10 * len(texts)  # real SPLADE vectors, not all zeros
    # one text at a time (no padding) gives the same rows
    single = np.vstack([onnx.encode([t], "doc").toarray() for t in DOCS])
    assert np.abs(single - enc.encode(DOCS, "doc", show_progress=False).toarray()).max() <= TOL


def test_onnx_graph_is_the_splade_pooling_of_the_mlm_logits(exported):
    """The reference: max over attention_mask=1 positions of log1p(relu(logits)), logits from the HF model itself."""
    enc, out = exported
    batch = enc.tokenizer(DOCS[:3], padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        logits = enc.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.numpy()
    act = np.log1p(np.maximum(logits, 0.0))
    real = batch["attention_mask"].numpy().astype(bool)
    expected = np.stack([act[i][real[i]].max(axis=0) for i in range(len(real))])
    session = ort.InferenceSession(str(out / "doc.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(
        ["sparse_embedding"], {k: batch[k].numpy().astype(np.int64) for k in ("input_ids", "attention_mask")}
    )[0]
    assert np.abs(got - expected).max() <= TOL
    manifest = json.loads((out / "onnx.json").read_text())
    assert manifest["sides"] == {"doc": "doc.onnx", "query": "doc.onnx"} and manifest["prompt"] == ""


@pytest.mark.slow
@pytest.mark.parametrize("family", [TinyModernBert, TinyRoberta], ids=["modernbert", "roberta"])
def test_onnx_export_of_the_papers_target_families_equals_their_encoder(family, tmp_path):
    """ModernBERT's head (`head` + `decoder`, unpadding attention) and RoBERTa's `lm_head`, on their real BPE
    tokenizers: the exported graph finds the decoder and masks padding (one padded batch) as the encoder does."""
    b = family()
    enc = SpladeEncoder(b.load_model(), b.load_tokenizer(), query_max_length=16, doc_max_length=64, precision="fp32")
    onnx = OnnxSparseEncoder(export_onnx(enc, tmp_path / "onnx"), threads=2)
    theirs, ours = read_back(onnx, enc, DOCS + ["Apple APPLE apple " * 30], batch_size=8)
    assert np.abs(theirs - ours).max() <= TOL
    assert json.loads((tmp_path / "onnx" / "onnx.json").read_text())["graph_version"] == GRAPH_VERSION


@pytest.mark.train
def test_stage_export_onnx_true_writes_graphs_and_card_into_the_model_dir(tmp_path):
    out = tmp_path / "st"
    cfg = compose_config(
        [
            "stage=export",
            "backbone=splade-tiny",
            "vocab=native",
            f"export.out={out}",
            f"paths.run_dir={tmp_path / 'run'}",
            "export.onnx=true",
            "data.doc_max_length=64",
            "model.encoder.precision=fp32",
        ]
    )
    state = run(cfg)
    theirs, ours = read_back(OnnxSparseEncoder(out / "onnx"), state["encoder"], DOCS)
    assert np.abs(theirs - ours).max() <= TOL
    card = (out / "README.md").read_text()
    assert "## ONNX" in card and "`onnx/`" in card and 'SparseEncoder("path/to/this/directory")' in card


@pytest.mark.train
def test_onnx_without_the_model_directory_is_one_line(tmp_path, capsys):
    cfg = compose_config(
        [
            "stage=export",
            "vocab=native",
            f"paths.run_dir={tmp_path}",
            "export.onnx=true",
            "export.sentence_transformers=false",
            "export.vectors.formats=[anserini]",
        ]
    )
    with pytest.raises(SystemExit) as exc:
        run_or_exit(cfg)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "export.onnx=true" in err[0] and "export.sentence_transformers=true" in err[0]


def test_missing_manifest_is_one_line(tmp_path):
    with pytest.raises(VtlabError, match=r"no onnx.json \(not a directory written by export.onnx=true\)"):
        OnnxSparseEncoder(tmp_path)
