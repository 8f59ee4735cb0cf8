"""vtlab.core.records: a crafted run record (.hydra/config.yaml) is refused before it expands — YAML aliases nested,
interpolations nested, a huge file — while every record a real run writes reads as OmegaConf.load reads it."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from helpers import compose_config
from omegaconf import OmegaConf

from vtlab.core.records import MAX_RESOLVED_CHARS, RecordError, load_record


def _alias_bomb(levels: int = 30) -> str:
    lines = ["a0: [x, x]"] + [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, levels)]
    lines[0] = "a0: &a0 [x, x]"
    return "\n".join(lines) + "\n"


def _interpolation_bomb(levels: int = 60) -> str:
    return "k0: xxxxxxxx\n" + "".join(f"k{i}: ${{k{i - 1}}}${{k{i - 1}}}\n" for i in range(1, levels))


@pytest.mark.parametrize(
    "text,said",
    [
        (_alias_bomb(), "holds a YAML alias (*a0)"),
        (_interpolation_bomb(), "would resolve to"),
        ("a: !!python/object/apply:os.system ['true']\n", "could not determine a constructor"),
        ("- just\n- a list\n", None),
    ],
)
def test_a_crafted_record_is_refused_at_once_naming_the_file(tmp_path: Path, text: str, said: str | None) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    tracemalloc.start()
    if said is None:  # a list is data: the callers say it is no mapping
        tracemalloc.stop()
        assert not OmegaConf.is_dict(load_record(path))
        return
    with pytest.raises(RecordError) as ei:
        load_record(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert str(ei.value).startswith(f"{path}: ") and said in str(ei.value)
    assert peak < 64 * 2**20  # nothing expanded (the bombs would take gigabytes): memory, not time, on any CPU


def test_a_huge_record_is_refused_by_its_size(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("a: " + "x" * (5 * 1024 * 1024) + "\n")
    with pytest.raises(RecordError, match="bytes, over the"):
        load_record(path)


def test_an_interpolation_just_under_the_bound_and_a_real_run_s_record_read_as_omegaconf_reads_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"a: {'x' * (MAX_RESOLVED_CHARS // 2)}\nb: ${{a}}${{a}}\n")
    assert len(load_record(path).b) == MAX_RESOLVED_CHARS
    cfg = compose_config(["stage=evaluate"])
    OmegaConf.save(cfg, path)  # as Hydra writes .hydra/config.yaml: unresolved interpolations kept
    assert load_record(path) == OmegaConf.load(path)
