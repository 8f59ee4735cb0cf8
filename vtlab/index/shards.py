"""A corpus index encoded by independent jobs (stage=encode stage.encode.num_shards=n), and its merge.

- `shard_bounds`: the contiguous slice of the corpus (corpus order) each of n shards encodes. Cuts fall on multiples
  of `window` documents: the encoder length-sorts documents within windows of that many (vtlab.models.predict), so a
  document meets the same batch, and gets the same vector to the bit, however many shards the corpus is cut into.
- `write_shard`: <index>/shard-<i>-of-<n>/ with docs.npz, doc_ids.json and shard.json, the shard's record (i, n, the
  slice, the collection, a fingerprint of the corpus ids, the model: vtlab.models.encoder.vectors_key, the batching),
  renamed into place whole (shard.json present: complete).
- `check_shards`: the shard directories of an index are one encoding: every entry named shard-* is a directory named
  after the part its record claims (a second copy, shard-1-of-3.bak or shard-01-of-3, is refused, naming both), every
  shard 0..n-1 present, the same n, corpus, model and batching, slices contiguous and covering the corpus.
- `merge_shards`: <index>/docs.npz and doc_ids.json, streamed shard by shard (no shard held with another), byte-equal
  to one unsharded job's (`save_csr` writes a CSR in scipy's npz layout with fixed zip metadata: equal matrices,
  equal bytes; scipy.sparse.load_npz reads it).
- `iter_index`: an index's (doc ids, CSR rows) in corpus order, a part at a time: its docs.npz, else its checked shards.

The rule for what is read: shards are a job's output, not a cache entry, so nothing is rebuilt behind the user's back.
A foreign shard (another n, corpus, model or batching), a duplicated, misnamed or missing part, and a damaged file
(a record that is not JSON or not a shard record, an npz that is truncated, not an archive or inconsistent:
vtlab.core.npz_files, arrays only, nothing pickled) are each one DataError line naming the file and what was
expected; at the command line, exit status 2.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import scipy.sparse as sp

from vtlab.core.atomic import atomic_dir, atomic_write_bytes, atomic_write_text, stable_hash, write_json
from vtlab.core.errors import ConfigError, DataError
from vtlab.core.json_files import JsonFileError, read_json
from vtlab.core.npz_files import csr_of, read_npz

SHARD_FILE = "shard.json"
# where a job's shard index comes from when stage.encode.shard is null, in this order
SHARD_ENV = ("SLURM_ARRAY_TASK_ID", "VTLAB_SHARD")
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # the zip format's earliest date: no clock in the bytes


def shard_name(i: int, n: int) -> str:
    return f"shard-{i}-of-{n}"


def shard_bounds(n_docs: int, num_shards: int, window: int) -> list[tuple[int, int]]:
    """[start, stop) of each shard: whole windows of `window` documents, dealt as evenly as they go (a shard gets no
    document when there are fewer windows than shards)."""
    windows = -(-n_docs // window)
    cuts = [min(n_docs, (k * windows // num_shards) * window) for k in range(num_shards + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


def shard_index(shard: Any, num_shards: Any, environ: Mapping[str, str] = os.environ) -> int | None:
    """This job's shard: stage.encode.shard, else (num_shards > 1) the first of SHARD_ENV set; None: not sharded."""
    if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
        raise ConfigError(f"stage.encode.num_shards={num_shards!r}: expected an integer >= 1")
    if num_shards == 1 and shard in (None, 0):
        return None
    key, value = "stage.encode.shard", shard
    if shard is None:
        key, value = next(((k, environ[k]) for k in SHARD_ENV if environ.get(k, "").strip()), (None, None))
        if key is None:
            raise ConfigError(
                f"stage.encode.num_shards={num_shards} and stage.encode.shard=null, but neither "
                f"{' nor '.join(SHARD_ENV)} is set: set stage.encode.shard=<0..{num_shards - 1}>"
            )
        value = int(value) if str(value).strip().isdigit() else value
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < num_shards:
        raise ConfigError(
            f"{key}={value!r}: expected a shard index 0..{num_shards - 1} (stage.encode.num_shards={num_shards}; "
            "a SLURM array of n shards is --array=0-<n-1>)"
        )
    return value


def corpus_fingerprint(doc_ids: Iterable[str]) -> str:
    """Names the corpus a shard was cut from: a digest of its ids in corpus order (streamed)."""
    return stable_hash((f"{d}\n".encode() for d in doc_ids), length=20)


# ---- docs.npz: scipy's CSR layout, written with fixed metadata and streamed -----------------------------------------
def _index_dtype(nnz: int, n_cols: int) -> np.dtype:
    return np.dtype("<i4") if max(nnz, n_cols) < 2**31 else np.dtype("<i8")


def _write_npy(zf: zipfile.ZipFile, name: str, dtype: np.dtype, shape: tuple[int, ...], parts: Iterable[Any]) -> None:
    info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_TIME)
    info.external_attr = 0o644 << 16
    with zf.open(info, "w", force_zip64=True) as f:
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_1_0(f, header)
        for part in parts:
            f.write(np.ascontiguousarray(part, dtype=dtype).reshape(-1).view(np.uint8).data)


def _write_csr(f: BinaryIO, shape: tuple[int, int], nnz: int, parts: Callable[[str], Iterator[np.ndarray]]) -> None:
    """The npz entries of a CSR (scipy.sparse.save_npz's names); `parts(name)` yields that array's pieces in order
    (indptr's pieces without the leading 0)."""
    index = _index_dtype(nnz, shape[1])
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        _write_npy(zf, "indices", index, (nnz,), parts("indices"))
        _write_npy(zf, "indptr", index, (shape[0] + 1,), [np.zeros(1, index), *parts("indptr")])
        _write_npy(zf, "format", np.dtype("S3"), (), [np.array(b"csr")])
        _write_npy(zf, "shape", np.dtype("<i8"), (2,), [np.array(shape)])
        _write_npy(zf, "data", np.dtype("<f4"), (nnz,), parts("data"))


def save_csr(path: str | os.PathLike[str], m: sp.csr_matrix) -> Path:
    """`m` (canonical CSR, float32) as docs.npz, atomically; equal matrices give equal bytes."""
    m = sp.csr_matrix(m)

    def parts(name: str) -> Iterator[np.ndarray]:
        yield m.indptr[1:] if name == "indptr" else getattr(m, name)

    return atomic_write_bytes(path, lambda f: _write_csr(f, m.shape, m.nnz, parts))


# ---- shards --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shard:
    path: Path
    i: int
    n: int
    start: int
    stop: int
    n_docs: int  # the whole corpus's
    collection: str
    fingerprint: str
    model: str  # vtlab.models.encoder.vectors_key of the encoder
    batching: tuple[int, int]  # (batch_size, window): what fixes each document's batch


def write_shard(
    index_dir: Path,
    i: int,
    n: int,
    bounds: tuple[int, int],
    docs: sp.csr_matrix,
    doc_ids: Sequence[str],
    info: Mapping[str, Any],
) -> Path:
    """<index_dir>/shard-<i>-of-<n>/, whole or not at all. `info`: collection, n_docs, fingerprint, model, batch_size,
    window (and anything else to record, e.g. timings)."""
    if docs.shape[0] != len(doc_ids) or len(doc_ids) != bounds[1] - bounds[0]:
        raise ValueError(f"shard {i} of {n}: {docs.shape[0]} rows, {len(doc_ids)} ids for the slice {bounds}")
    with atomic_dir(index_dir / shard_name(i, n)) as tmp:
        save_csr(tmp / "docs.npz", docs)
        atomic_write_text(tmp / "doc_ids.json", [json.dumps(list(doc_ids))])
        write_json(tmp / SHARD_FILE, {"shard": i, "num_shards": n, "start": bounds[0], "stop": bounds[1], **info})
    return index_dir / shard_name(i, n)


def _read_shard(path: Path, index_dir: Path) -> Shard:
    where = f"{index_dir}: {path.name}"
    if not path.is_dir():
        raise DataError(f"{where} is not a directory; expected only shard-<i>-of-<n>/ directories there: remove it")
    if not (path / SHARD_FILE).exists():
        raise DataError(f"{where}/ is incomplete (no {SHARD_FILE}: its job did not finish); run it again")
    try:
        meta = read_json(path / SHARD_FILE)
        shard = Shard(
            path, int(meta["shard"]), int(meta["num_shards"]), int(meta["start"]), int(meta["stop"]),
            int(meta["n_docs"]), str(meta["collection"]), str(meta["fingerprint"]), str(meta["model"]),
            (int(meta["batch_size"]), int(meta["window"])),
        )  # fmt: skip
    except JsonFileError as e:  # names the file
        raise DataError(f"{e}; expected a shard record") from None
    except (ValueError, KeyError, TypeError) as e:
        raise DataError(f"{where}/{SHARD_FILE} is not a shard record ({type(e).__name__}: {e})") from None
    if not 0 <= shard.i < shard.n:
        raise DataError(f"{where}/{SHARD_FILE} is not a shard record (shard {shard.i} of {shard.n})")
    return shard


def _refuse_misnamed(shards: Sequence[Shard], index_dir: Path) -> None:
    """DataError naming the first shard whose directory is not named after the part its record claims, and the
    shard of that name if there is one (two directories claiming one part: a second copy)."""
    names = {s.path.name for s in shards}
    for s in shards:
        name = shard_name(s.i, s.n)
        if s.path.name != name:
            twin = f", as {name}/ does" if name in names else ""
            raise DataError(
                f"{index_dir}: {s.path.name}/ holds shard {s.i} of {s.n} ({SHARD_FILE}){twin}: a duplicated or "
                f"misnamed shard; remove it (shard {s.i} of {s.n} is {name}/)"
            )


def _odd_one(shards: Sequence[Shard], key: Callable[[Shard], Any]) -> tuple[Shard, Any] | None:
    """The first shard whose `key` differs from the most shards' (and that value), or None."""
    common = Counter(key(s) for s in shards).most_common(1)[0][0]
    return next(((s, common) for s in shards if key(s) != common), None)


def check_shards(index_dir: str | os.PathLike[str]) -> list[Shard]:
    """The shards of `index_dir` in order, checked to be one complete encoding; DataError (one line) otherwise."""
    index_dir = Path(index_dir)
    entries = sorted(index_dir.glob("shard-*"))  # a builder's temp directories are hidden (.shard-…)
    if not entries:
        raise DataError(f"{index_dir}: no shard-<i>-of-<n>/ directories (stage=encode stage.encode.num_shards=n)")
    shards = [_read_shard(p, index_dir) for p in entries]
    _refuse_misnamed(shards, index_dir)
    checks: list[tuple[Callable[[Shard], Any], str]] = [
        (lambda s: s.n, "is one of {v} shards, the others of {c}"),
        (lambda s: (s.fingerprint, s.n_docs), "encodes another corpus (ids {v[0]}, {v[1]} documents; the others: "
         "{c[0]}, {c[1]})"),
        (lambda s: s.model, "was encoded by another model or encoder config (model {v}; the others: {c})"),
        (lambda s: s.batching, "was batched otherwise (batch_size, window = {v}; the others: {c})"),
    ]  # fmt: skip
    for key, what in checks:
        if (odd := _odd_one(shards, key)) is not None:
            s, common = odd
            raise DataError(
                f"{index_dir}: {s.path.name}/ {what.format(v=key(s), c=common)}: a foreign shard; remove it"
            )
    n, n_docs = shards[0].n, shards[0].n_docs
    by_index = {s.i: s for s in shards}  # one shard per part: _refuse_misnamed and the same n
    for i in range(n):
        if i not in by_index:
            raise DataError(f"{index_dir}: shard {i} of {n} is missing ({shard_name(i, n)}/)")
    ordered = [by_index[i] for i in range(n)]
    at = 0
    for s in ordered:
        if s.start != at or s.stop < s.start:
            raise DataError(
                f"{index_dir}: {s.path.name}/ covers documents {s.start}..{s.stop}, expected a slice from {at}: "
                "its shards were cut otherwise; encode it again"
            )
        at = s.stop
    if at != n_docs:
        raise DataError(f"{index_dir}: the shards cover {at} of {n_docs} documents")
    return ordered


def _shard_ids(s: Shard) -> list[str]:
    ids = read_json(s.path / "doc_ids.json", list, "the shard's document ids", DataError)
    if len(ids) != s.stop - s.start:
        raise DataError(f"{s.path}/doc_ids.json: {len(ids)} ids for documents {s.start}..{s.stop}")
    return ids


def _csr_rows(s: Shard) -> str:
    return f"the CSR rows of documents {s.start}..{s.stop} in scipy's npz layout"


def _npy_shape(z: np.lib.npyio.NpzFile, name: str) -> tuple[int, ...]:
    """The shape an archive's array `name` has, from its header (nothing loaded)."""
    with z.zip.open(f"{name}.npy") as f:
        fmt = np.lib.format
        read = fmt.read_array_header_1_0 if fmt.read_magic(f) == (1, 0) else fmt.read_array_header_2_0
        return tuple(read(f)[0])


def _shard_header(s: Shard) -> tuple[tuple[int, int], int]:
    """(shape, nnz) of a shard's docs.npz, from its arrays' headers (nothing loaded), checked to be a CSR of the
    shard's rows."""
    path = s.path / "docs.npz"

    def read(z: np.lib.npyio.NpzFile) -> tuple[tuple[int, ...], dict[str, tuple[int, ...]]]:
        return tuple(int(x) for x in z["shape"]), {a: _npy_shape(z, a) for a in ("data", "indices", "indptr")}

    shape, arrays = read_npz(path, read, _csr_rows(s))
    nnz = arrays["data"][0] if len(arrays["data"]) == 1 else -1
    if (
        len(shape) != 2
        or shape[0] != s.stop - s.start
        or arrays["indices"] != (nnz,)
        or arrays["indptr"] != (shape[0] + 1,)
    ):
        raise DataError(f"{path}: a {shape} matrix with arrays of shapes {arrays}; expected {_csr_rows(s)}")
    return (shape[0], shape[1]), nnz


def merge_shards(index_dir: str | os.PathLike[str]) -> Path:
    """<index_dir>/docs.npz and doc_ids.json from its checked shards, each array streamed a shard at a time; also
    encode.json (the collection, counts, the shards). Returns docs.npz's path."""
    index_dir = Path(index_dir)
    shards = check_shards(index_dir)
    headers = [_shard_header(s) for s in shards]
    widths = {shape[1] for shape, _ in headers}
    if len(widths) != 1:
        raise DataError(f"{index_dir}: the shards' vectors have different widths {sorted(widths)}: another model")
    shape = (shards[-1].stop, widths.pop())
    nnz = sum(n for _, n in headers)
    index = _index_dtype(nnz, shape[1])

    def parts(name: str) -> Iterator[np.ndarray]:
        offset = 0
        for s, (_, count) in zip(shards, headers):
            a = read_npz(s.path / "docs.npz", lambda z: z[name], _csr_rows(s))
            if name == "indptr":
                yield a[1:].astype(index) + offset
                offset += count
            else:
                yield a

    ids: list[str] = []
    for s in shards:  # every shard's ids read before anything is written: a failed merge leaves no docs.npz
        ids += _shard_ids(s)
    docs = atomic_write_bytes(index_dir / "docs.npz", lambda f: _write_csr(f, shape, nnz, parts))
    atomic_write_text(index_dir / "doc_ids.json", [json.dumps(ids)])
    first = shards[0]
    write_json(
        index_dir / "encode.json",
        {
            "collection": first.collection,
            "n_docs": shape[0],
            "doc_active_dims": round(nnz / max(shape[0], 1), 1),
            "fingerprint": first.fingerprint,
            "model": first.model,
            "merged_from": [s.path.name for s in shards],
        },
    )
    return docs


def iter_index(index_dir: str | os.PathLike[str]) -> Iterator[tuple[list[str], sp.csr_matrix]]:
    """(doc ids, their rows) of an encoded index in corpus order: its docs.npz whole, else its shards one at a time
    (checked first)."""
    index_dir = Path(index_dir)
    if (index_dir / "docs.npz").is_file():
        ids = read_json(index_dir / "doc_ids.json", list, "the index's document ids", DataError)
        expected = f"the CSR rows of its {len(ids)} documents in scipy's npz layout"
        docs = read_npz(index_dir / "docs.npz", csr_of, expected)
        if docs.shape[0] != len(ids):
            raise DataError(f"{index_dir}: docs.npz has {docs.shape[0]} rows, doc_ids.json {len(ids)} ids")
        yield ids, docs
        return
    for s in check_shards(index_dir):
        docs = read_npz(s.path / "docs.npz", csr_of, _csr_rows(s))
        if docs.shape[0] != s.stop - s.start:
            raise DataError(f"{s.path}/docs.npz: {docs.shape[0]} rows; expected {_csr_rows(s)}")
        yield _shard_ids(s), docs
