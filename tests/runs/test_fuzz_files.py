"""Non-regular files where a reader expects a file (tests/fuzz.py): a directory, a named pipe, a link to a copy inside
the inputs' folder or outside it, a hard link, a link to nothing, an unreadable file. A link or a hard link reads as
the file it leads to (reading through a link writes nothing anywhere); the others are one `vtlab: error:` line naming
the file, or for a `reuse_runs` target's status.json, a job that did not finish; a pipe never hangs a read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fuzz import (
    READERS,
    REPLACEMENTS,
    call_bounded,
    check_refused,
    explore,
    fresh,
    one_line,
    read_valid,
    replace_file,
    snapshot,
    spec_file,
    user_error,
    write_files,
)

LIMIT_S = 5  # a read of a few small files: far less; a pipe waited on: forever

CASES = [
    (reader.name, rel, how)
    for reader in READERS.values()
    for rel in reader.specs
    if reader.mutated_files is None or rel in reader.mutated_files
    for how in REPLACEMENTS
]


@pytest.mark.parametrize("reader,file,how", CASES, ids=["-".join(c) for c in CASES])
def test_a_non_regular_input_file_is_read_through_or_refused_in_one_line(
    tmp_path: Path, reader: str, file: str, how: str
) -> None:
    if how == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads a file whatever its mode")
    r = READERS[reader]

    def body(draw) -> None:
        files = draw(r.model)
        root = fresh(tmp_path)
        write_files(root, files)
        target = root / spec_file(r, files, file)
        replace_file(target, how, tmp_path / "outside")
        before = snapshot(root)
        outside = snapshot(tmp_path / "outside") if (tmp_path / "outside").exists() else {}
        if how in ("symlink_inside", "symlink_outside", "hardlink"):
            got = call_bounded(lambda: r.view(read_valid(r, root, f"a {how} to a valid file")), LIMIT_S, ())
            assert not got.extra.get("hung"), f"{reader} hung reading through a {how}"
            if got.error is not None:
                raise got.error
            assert got.result == r.expected(files), f"{reader}: a {how} read as other content"
        elif r.nonregular == "absent":  # status.json: no readable record, so a job that did not finish
            got = call_bounded(lambda: r.read(root), LIMIT_S, (target,))
            assert not got.extra.get("hung"), f"{reader} hung on a {how}"
            if got.error is not None:
                shown = user_error(got.error)
                assert shown is not None, f"{reader}: {got.error!r} would be a traceback"
                assert "\n" not in one_line(shown)
            r.refusals(root)
        else:
            got = call_bounded(lambda: check_refused(r, root, [target.name], f"with a {how}"), LIMIT_S, (target,))
            assert not got.extra.get("hung"), f"{reader} hung on a {how} in place of {target.name}"
            if got.error is not None:
                raise got.error
        assert snapshot(root) == before, f"{reader} changed its inputs' folder"
        if outside:
            assert snapshot(tmp_path / "outside") == outside, f"{reader} changed the file a link leads to"

    explore(f"non-regular {reader} {file} {how}", 2, body, shrink=False)  # a hang costs LIMIT_S an example


# ---- an export's vtlab_export.json: what makes a directory an earlier export, which export.overwrite replaces ----
@pytest.mark.parametrize("how", [None, *REPLACEMENTS])
def test_an_export_manifest_that_is_no_file_does_not_make_a_directory_replaceable(tmp_path: Path, how) -> None:
    from vtlab.core.errors import ConfigError
    from vtlab.runs.paths import EXPORT_MANIFEST, check_export_target

    if how == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads a file whatever its mode")
    out = tmp_path / "export"
    out.mkdir()
    (out / "modules.json").write_text("[]")
    manifest = out / EXPORT_MANIFEST
    manifest.write_text('{"encoder": {}, "source": {}}\n')
    if how is not None:
        replace_file(manifest, how, tmp_path / "outside")
    got = call_bounded(lambda: check_export_target(out, overwrite=True), LIMIT_S, (manifest,))
    assert not got.extra.get("hung")
    if how in (None, "hardlink"):  # a regular file holding what the export writes: the export it marks
        assert got.error is None and got.result is True
    else:  # a link (in or out), a file it cannot read, no file: not what an export writes, so nothing is replaced
        assert isinstance(got.error, ConfigError), got.error
        assert "export.out" in one_line(got.error) and EXPORT_MANIFEST in one_line(got.error)
