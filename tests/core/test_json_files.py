"""JSON read from disk (vtlab.core.json_files.read_json and its users): every way a file can be wrong is one error
naming the file, a pipe is refused rather than waited on, and a damaged record is never taken for a good one —
teacher scores, an ONNX export's manifest, an export's vtlab_export.json."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from vtlab.core.errors import DataError, VtlabError
from vtlab.core.json_files import read_json
from vtlab.data.examples import TripletExample
from vtlab.data.teacher import cached_scores
from vtlab.runs.paths import EXPORT_MANIFEST, check_export_target

BAD = {
    "not JSON": b'{"a": 1',
    "a key twice": b'{"a": 1, "a": 2}',
    "nesting too deep": b"[" * 100_000 + b"]" * 100_000,
    "a number too long": b"1" * 5_000,
    "not UTF-8": b'{"a": "\xff"}',
    "the wrong kind": b"[1, 2]",
    "empty": b"",
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_file_is_one_error_naming_it(tmp_path: Path, case: str) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(BAD[case])
    with pytest.raises(VtlabError) as raised:
        read_json(path, dict, "a record")
    message = str(raised.value)
    assert message.startswith(f"{path}: ") and "\n" not in message, message


def test_a_pipe_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "x.json"
    os.mkfifo(fifo)
    out: list[BaseException] = []

    def read() -> None:
        try:
            read_json(fifo)
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            out.append(e)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "read_json waited on a named pipe"
    assert isinstance(out[0], VtlabError) and "not a regular file" in str(out[0])


def test_a_good_file_reads_as_written(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    value = {"a": [1, 2.5, "é"], "b": {"c": None}}
    path.write_text(json.dumps(value), encoding="utf-8")
    assert read_json(path) == value


@pytest.mark.parametrize("stored", ["[[null, 1]]", '[["x", 1]]', "[[NaN, 1]]", "[[true, 1]]", "[[1]]", "[1]", "{}"])
def test_damaged_teacher_scores_are_named_never_trusted(tmp_path: Path, stored: str) -> None:
    path = tmp_path / "scores.json"
    path.write_text(stored)
    ex = [TripletExample(query="q", positive="p", negatives=["n"])]
    with pytest.raises(DataError) as raised:
        cached_scores(path, ex, lambda: [[1.0, 0.0]])
    assert str(raised.value).startswith(f"{path}: ") and "delete it to recompute" in str(raised.value)
    assert cached_scores(tmp_path / "fresh.json", ex, lambda: [[1.0, 0.0]]) == [[1.0, 0.0]]


@pytest.mark.parametrize("manifest", ["{", "[]", '{"sides": {}}', '{"encoder": {"max_length": 3}}'])
def test_a_damaged_onnx_manifest_is_one_error_naming_it(tmp_path: Path, manifest: str) -> None:
    from vtlab.export.onnx_runtime import MANIFEST, OnnxSparseEncoder

    (tmp_path / MANIFEST).write_text(manifest)
    with pytest.raises(VtlabError) as raised:
        OnnxSparseEncoder(tmp_path)
    assert str(raised.value).startswith(f"{tmp_path / MANIFEST}: ") and "\n" not in str(raised.value)


@pytest.mark.parametrize("kind", ["empty", "damaged", "linked"])
def test_only_an_export_s_own_manifest_makes_a_folder_replaceable(tmp_path: Path, kind: str) -> None:
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere.json"
    out.mkdir()
    (out / "data.tsv").write_text("a user's data\n")
    elsewhere.write_text(json.dumps({"encoder": {"kind": "siamese"}}))
    manifest = out / EXPORT_MANIFEST
    if kind == "linked":
        manifest.symlink_to(elsewhere)
    else:
        manifest.write_text({"empty": "", "damaged": '{"encoder": '}[kind])
    with pytest.raises(VtlabError, match="replaces only an earlier export"):
        check_export_target(out, overwrite=True)
    manifest.unlink()
    manifest.write_text(elsewhere.read_text())
    assert check_export_target(out, overwrite=True) is True
