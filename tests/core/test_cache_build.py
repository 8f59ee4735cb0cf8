"""Cache entries are built through vtlab.core.integrity.build: a full disk is one line naming the entry and leaves no
temp dir; temp dirs that a killed builder left are removed by the next build on the same host, a live builder's are
not."""

import errno
import os
import socket
import subprocess
import sys

import pytest

from vtlab.core import integrity
from vtlab.core.errors import DiskError


def _write(tmp):
    (tmp / "model.safetensors").write_bytes(b"weights")


def test_build_publishes_a_sealed_entry(tmp_path):
    out = integrity.build(tmp_path / "entry", _write)
    assert integrity.problem(out) is None and (out / "model.safetensors").read_bytes() == b"weights"
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]


def test_full_disk_is_one_line_naming_the_entry_and_leaves_nothing(tmp_path):
    def full(tmp):
        (tmp / "half").write_bytes(b"x")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(DiskError, match=r"entry: cannot write.*ENOSPC") as info:
        integrity.build(tmp_path / "entry", full)
    assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.cli
def test_orphans_of_a_killed_builder_go_and_live_or_foreign_ones_stay(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = socket.gethostname()
    orphan = tmp_path / f".entry.{host}-{int(dead.stdout)}.abc123"
    live = tmp_path / f".entry.{host}-{os.getpid()}.def456"
    foreign = tmp_path / f".entry.otherhost-{int(dead.stdout)}.ghi789"
    for d in (orphan, live, foreign):
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"half")
    integrity.build(tmp_path / "entry", _write)
    assert not orphan.exists() and live.exists() and foreign.exists()
