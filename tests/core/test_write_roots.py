"""No write leaves its root, whatever links the tree holds (vtlab.core.atomic.guard_write, called by every writer of
vtlab.core.atomic), and every cache folder is closed to other users by one rule (vtlab.core.assets.closed_to_others)."""

import json
import logging
import os
import stat
from pathlib import Path

import pytest

from vtlab.core import assets
from vtlab.core.atomic import atomic_dir, atomic_path, atomic_write, build_dir, write_json
from vtlab.core.errors import AssetError, LinkError, note_write_roots, write_roots


@pytest.fixture
def roots(tmp_path):
    run, cache, elsewhere = tmp_path / "run", tmp_path / "cache", tmp_path / "elsewhere"
    for d in (run, cache, elsewhere):
        d.mkdir()
    saved = write_roots()
    note_write_roots(run, cache)
    yield run, cache, elsewhere
    note_write_roots(*saved)


def test_no_writer_follows_a_link_out_of_the_run_or_the_cache(roots):
    run, cache, elsewhere = roots
    (run / "eval").symlink_to(elsewhere)
    (cache / "transfers").symlink_to(elsewhere)
    writes = [
        lambda: write_json(run / "eval" / "x" / "metrics.json", {"a": 1}),
        lambda: atomic_write(run / "eval" / "run.trec", lambda f: f.write("x")),
        lambda: atomic_path(run / "eval" / "plot.png").__enter__(),
        lambda: atomic_dir(cache / "transfers" / "entry").__enter__(),
        lambda: build_dir(cache / "transfers" / "entry", lambda tmp: (tmp / "f").write_text("x"), lambda p: False),
    ]
    for write in writes:
        with pytest.raises(LinkError, match="out of .*: nothing is written out of a run or cache directory through"):
            write()
    assert list(elsewhere.iterdir()) == []  # nothing landed there


def test_links_inside_a_root_or_into_another_root_and_paths_outside_roots_are_written(roots):
    run, cache, elsewhere = roots
    (cache / "mlm").mkdir()
    (run / "mlm").symlink_to(cache / "mlm")  # a run's link to its cached MLM stage: another root
    (run / "inner").mkdir()
    (run / "alias").symlink_to(run / "inner")
    write_json(run / "mlm" / "a.json", {"a": 1})
    write_json(run / "alias" / "b.json", {"b": 2})
    write_json(elsewhere / "c.json", {"c": 3})  # asked for outside every root: the user's choice
    assert json.loads((cache / "mlm" / "a.json").read_text()) == {"a": 1}
    assert (run / "inner" / "b.json").is_file() and (elsewhere / "c.json").is_file()


def test_a_cache_folder_every_user_can_write_is_closed_or_refused(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("VTLAB_CACHE", str(tmp_path / "cache"))
    shared = assets.cache_dir("transfers")
    os.chmod(shared, 0o777)
    with caplog.at_level(logging.WARNING, logger="vtlab"):
        assert assets.cache_dir("transfers", "entry") == shared / "entry"
    assert stat.S_IMODE(shared.stat().st_mode) == 0o775  # group-writable kept: a team's shared cache
    assert [r.getMessage() for r in caplog.records] == [f"{shared} was writable by every user (mode 777): made 775"]
    os.chmod(tmp_path / "cache", 0o1777)  # sticky, as /tmp: others cannot replace what is ours
    assets.cache_dir("transfers")
    os.chmod(shared, 0o777)
    monkeypatch.setattr(assets.os, "getuid", lambda: os.stat(shared).st_uid + 1)  # another user's folder
    with pytest.raises(AssetError, match=f"{shared}: a cache folder every user can write .* set VTLAB_CACHE"):
        assets.cache_dir("transfers")
    assert Path(shared).is_dir()
