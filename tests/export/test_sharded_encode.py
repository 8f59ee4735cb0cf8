"""stage=encode in 3 independent jobs + the merge: docs.npz, doc_ids.json and the Anserini / Qdrant exports byte-equal
to one job's; the slices are whole windows in corpus order; a missing, duplicated, foreign (another corpus, model or
config) or damaged shard is one line naming it."""

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import compose_config

from vtlab.core.errors import ConfigError, DataError
from vtlab.export.vectors import AnseriniJsonVectors, QdrantPoints, write_vectors
from vtlab.index.shards import check_shards, iter_index, save_csr, shard_bounds, shard_index
from vtlab.stages.build import build_encoder
from vtlab.stages.encode import run as encode
from vtlab.stages.pipeline import run_or_exit

WORDS = "the a river bank money loan water fish city north south law court paper tree green old new".split()
N_DOCS = 30
# batches of 4 sorted within windows of 2 batches: 4 windows (8, 8, 8, 6 documents) for 3 shards
SETTINGS = ["stage.encode.batch_size=4", "stage.encode.window=2"]


def write_collection(root: Path) -> dict[str, str]:
    rng = random.Random(0)
    corpus = {f"d{i:02d}": " ".join(rng.choices(WORDS, k=rng.randint(2, 40))) for i in range(N_DOCS)}
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in corpus.items()))
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "river bank"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td03\t1\n")
    return corpus


@pytest.fixture(scope="module")
def encoded(tmp_path_factory):
    root = tmp_path_factory.mktemp("sharded")
    corpus = write_collection(root / "coll")

    def config(run: Path, *more: str):
        base = ["stage=encode", "backbone=splade-tiny", "vocab=native", "apc=off", "logger=none", "eval=beir"]
        extra = ["model.encoder.precision=fp32", "model.encoder.doc_max_length=48", f"eval.path={root / 'coll'}"]
        return compose_config([*base, *extra, f"paths.run_dir={run}", *SETTINGS, *more])

    encoder = build_encoder(config(root / "one"))
    encode(config(root / "one"), {"encoder": encoder})
    for i in (2, 0, 1):  # the jobs of an array finish in any order
        encode(config(root / "three", "stage.encode.num_shards=3", f"stage.encode.shard={i}"), {"encoder": encoder})
    copy_shards(root / "three" / "index", root / "shards")  # the shards alone, before the merge
    encode(config(root / "three", "stage.encode.merge=true"), {})
    other = config(root / "other", "stage.encode.num_shards=3", "stage.encode.shard=1", "model.encoder.double_log=true")
    encode(other, {"encoder": build_encoder(other)})  # shard 1 of the same corpus, by another encoder config
    return root, corpus, encoder, config


def copy_shards(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> Path:
    for d in src.glob("shard-*-of-*"):
        if d.name not in skip:
            shutil.copytree(d, dst / d.name)
    return dst


def test_shards_are_whole_windows_in_corpus_order(encoded):
    root, corpus, _, _ = encoded
    assert shard_bounds(30, 3, 8) == [(0, 8), (8, 16), (16, 30)]
    assert shard_bounds(5, 3, 8) == [(0, 0), (0, 0), (0, 5)]  # fewer windows than shards: empty slices
    shards = check_shards(root / "three" / "index")
    assert [(s.i, s.n, s.start, s.stop) for s in shards] == [(0, 3, 0, 8), (1, 3, 8, 16), (2, 3, 16, 30)]
    ids = [json.loads((s.path / "doc_ids.json").read_text()) for s in shards]
    assert ids == [list(corpus)[0:8], list(corpus)[8:16], list(corpus)[16:30]]
    assert json.loads((shards[1].path / "shard.json").read_text())["collection"] == "coll"


def test_merge_is_byte_equal_to_one_job(encoded):
    root, corpus, encoder, _ = encoded
    assert not (root / "shards" / "docs.npz").exists()
    one, three = root / "one" / "index", root / "three" / "index"
    for name in ("docs.npz", "doc_ids.json"):
        assert (three / name).read_bytes() == (one / name).read_bytes(), name
    # and what they hold is the encoder's own vectors of the corpus, in corpus order (independent reference)
    docs = sp.load_npz(three / "docs.npz")
    ref = sp.csr_matrix(encoder.encode(list(corpus.values()), "doc", batch_size=4, show_progress=False))
    assert docs.dtype == np.float32 and docs.shape == ref.shape and docs.nnz == ref.nnz
    assert abs(docs - ref).max() < 1e-5
    assert json.loads((three / "doc_ids.json").read_text()) == list(corpus)


def test_save_csr_is_scipy_readable_and_deterministic(tmp_path):
    m = sp.random(7, 11, density=0.3, format="csr", dtype=np.float32, random_state=1)
    save_csr(tmp_path / "a.npz", m)
    save_csr(tmp_path / "b.npz", m.copy())
    back = sp.load_npz(tmp_path / "a.npz")
    assert (back != m).nnz == 0 and back.dtype == np.float32
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()


def export(encoder, index: Path, corpus: dict[str, str], out: Path) -> list[bytes]:
    formats = [AnseriniJsonVectors(out / "anserini" / "docs.jsonl"), QdrantPoints(out / "qdrant" / "points.jsonl")]
    n = write_vectors(encoder, list(corpus.items()), formats, show_progress=False, index=index)
    assert n == len(corpus)
    files = [f.path for f in formats] + [out / "qdrant" / "collection.json"]
    return [p.read_bytes() for p in files]


def test_exports_from_the_shards_are_byte_equal_to_one_jobs(encoded, tmp_path):
    root, corpus, encoder, _ = encoded
    want = export(encoder, root / "one" / "index", corpus, tmp_path / "one")
    streamed = root / "shards"  # the shards alone, not merged: read one at a time
    assert export(encoder, streamed, corpus, tmp_path / "a") == want
    assert len(list(iter_index(streamed))) == 3
    assert export(encoder, root / "three" / "index", corpus, tmp_path / "b") == want  # the merged index
    # the anserini file's first vector is the index's first row quantized (not something re-encoded)
    first = json.loads(want[0].decode().splitlines()[0])
    assert first["id"] == "d00" and first["vector"]
    other = dict(reversed(list(corpus.items())))  # another order: refused, nothing written
    with pytest.raises(Exception, match="document 0 is 'd00' there, 'd29'"):
        export(encoder, streamed, other, tmp_path / "c")
    assert not (tmp_path / "c" / "anserini" / "docs.jsonl").exists()


def merge_error(config, index: Path, capsys) -> list[str]:
    cfg = config(index.parent / "merge", "stage.encode.merge=true", f"stage.encode.dir={index}")
    with pytest.raises(SystemExit) as exc:
        run_or_exit(cfg)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip().splitlines()


def test_missing_duplicated_and_foreign_shards_are_one_line(encoded, tmp_path, capsys):
    root, _, _, config = encoded
    src = root / "shards"
    index = copy_shards(src, tmp_path / "missing" / "index", skip=("shard-1-of-3",))
    assert merge_error(config, index, capsys) == [f"vtlab: error: {index}: shard 1 of 3 is missing (shard-1-of-3/)"]

    index = copy_shards(src, tmp_path / "duplicated" / "index", skip=("shard-1-of-3",))  # shard 0 copied as 1
    shutil.copytree(src / "shard-0-of-3", index / "shard-1-of-3")
    assert merge_error(config, index, capsys) == [
        f"vtlab: error: {index}: shard-1-of-3/ holds shard 0 of 3 (shard.json), as shard-0-of-3/ does: a duplicated "
        "or misnamed shard; remove it (shard 0 of 3 is shard-0-of-3/)"
    ]

    for copy in ("shard-1-of-3.bak", "shard-01-of-3"):  # a second copy beside the first: refused, not skipped
        index = copy_shards(src, tmp_path / copy / "index")
        shutil.copytree(src / "shard-1-of-3", index / copy)
        assert merge_error(config, index, capsys) == [
            f"vtlab: error: {index}: {copy}/ holds shard 1 of 3 (shard.json), as shard-1-of-3/ does: a duplicated "
            "or misnamed shard; remove it (shard 1 of 3 is shard-1-of-3/)"
        ]

    index = copy_shards(src, tmp_path / "foreign" / "index")  # a shard of another corpus (its ids' fingerprint)
    meta = json.loads((index / "shard-2-of-3" / "shard.json").read_text())
    (index / "shard-2-of-3" / "shard.json").write_text(json.dumps({**meta, "fingerprint": "0" * 20}))
    (err,) = merge_error(config, index, capsys)
    assert err.startswith(f"vtlab: error: {index}: shard-2-of-3/ encodes another corpus") and "foreign" in err

    shutil.copytree(src / "shard-0-of-3", index / "shard-0-of-2")  # a shard of another split of the corpus
    meta = json.loads((index / "shard-0-of-2" / "shard.json").read_text())
    (index / "shard-0-of-2" / "shard.json").write_text(json.dumps({**meta, "num_shards": 2}))
    with pytest.raises(DataError, match="shard-0-of-2/ is one of 2 shards, the others of 3"):
        check_shards(index)


def test_a_shard_of_another_model_or_config_is_refused(encoded, tmp_path, capsys):
    root, _, _, config = encoded
    src = root / "shards"
    index = copy_shards(src, tmp_path / "index", skip=("shard-1-of-3",))
    shutil.copytree(root / "other" / "index" / "shard-1-of-3", index / "shard-1-of-3")  # double_log=true
    ours, theirs = (json.loads((d / "shard-1-of-3" / "shard.json").read_text())["model"] for d in (src, index))
    assert ours != theirs
    assert merge_error(config, index, capsys) == [
        f"vtlab: error: {index}: shard-1-of-3/ was encoded by another model or encoder config (model {theirs}; the "
        f"others: {ours}): a foreign shard; remove it"
    ]
    assert not (index / "docs.npz").exists()


def damage(path: Path) -> None:
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 2])


def test_a_damaged_shard_is_one_line_naming_the_file(encoded, tmp_path, capsys):
    root, _, _, config = encoded
    index = copy_shards(root / "shards", tmp_path / "npz" / "index")
    damage(index / "shard-1-of-3" / "docs.npz")
    expected = "expected the CSR rows of documents 8..16 in scipy's npz layout"
    assert merge_error(config, index, capsys) == [
        f"vtlab: error: {index}/shard-1-of-3/docs.npz: unreadable (BadZipFile: File is not a zip file); {expected}"
    ]
    with pytest.raises(DataError, match="unreadable"):  # read for an export, shard by shard: the same line
        list(iter_index(index))
    (index / "shard-1-of-3" / "docs.npz").write_bytes(b"\x80\x04N.")  # a pickle: refused, never run
    assert merge_error(config, index, capsys) == [
        f"vtlab: error: {index}/shard-1-of-3/docs.npz: unreadable (ValueError: This file contains pickled (object) "
        f"data. If you trust the file you can load it unsafely using the `allow_pickle=` keyword argument or "
        f"`pickle.load()`.); {expected}"
    ]

    index = copy_shards(root / "shards", tmp_path / "json" / "index")
    damage(index / "shard-0-of-3" / "shard.json")
    (err,) = merge_error(config, index, capsys)
    assert err.startswith(f"vtlab: error: {index}/shard-0-of-3/shard.json: invalid JSON (")
    assert err.endswith("; expected a shard record")
    damage(index / "shard-2-of-3" / "doc_ids.json")
    (index / "shard-0-of-3" / "shard.json").write_bytes((root / "shards" / "shard-0-of-3" / "shard.json").read_bytes())
    (err,) = merge_error(config, index, capsys)
    assert err.startswith(f"vtlab: error: {index}/shard-2-of-3/doc_ids.json: invalid JSON (")
    assert not (index / "docs.npz").exists() and not (index / "doc_ids.json").exists()


def test_shard_index_from_config_or_environment():
    assert shard_index(None, 1, {}) is None and shard_index(0, 1, {}) is None
    assert shard_index(2, 3, {"SLURM_ARRAY_TASK_ID": "0"}) == 2
    assert shard_index(None, 3, {"SLURM_ARRAY_TASK_ID": "1", "VTLAB_SHARD": "2"}) == 1
    assert shard_index(None, 3, {"VTLAB_SHARD": "2"}) == 2
    with pytest.raises(ConfigError, match="SLURM_ARRAY_TASK_ID=3: expected a shard index 0..2"):
        shard_index(None, 3, {"SLURM_ARRAY_TASK_ID": "3"})
    with pytest.raises(ConfigError, match="neither SLURM_ARRAY_TASK_ID nor VTLAB_SHARD is set"):
        shard_index(None, 3, {})
    with pytest.raises(ConfigError, match="stage.encode.num_shards=0"):
        shard_index(None, 0, {})
