"""Every command vtlab prints for the user to copy, or runs itself, reads back as itself: through the shell (shlex) and
then through Hydra's own override parser, whatever the directory's name holds (`,` `=` spaces quotes backslashes)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hypothesis import given
from hypothesis import strategies as st

from vtlab.core.overrides import override, quoted_list, shell_line, value
from vtlab.runs.lifecycle import rerun_command, resume_command

NAMES = ["plain", "a,b", "k=v", "two words", "it's", 'say "hi"', "back\\slash", "end\\", "[1, 2]", "${oc.env:HOME}"]
PARSER = OverridesParser.create()


def _value(argument: str) -> object:
    return PARSER.parse_overrides([argument])[0].value()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("command", [resume_command, rerun_command])
def test_a_printed_resume_or_rerun_line_copied_pins_the_same_directory(tmp_path: Path, name: str, command) -> None:
    run_dir = tmp_path / name
    line = command(["stage=finetune", "trainer.max_steps=2", f"hydra.run.dir={quoted_list([run_dir])}"], run_dir)
    argv = shlex.split(line)
    assert argv[:5] == ["python", "-m", "vtlab", "stage=finetune", "trainer.max_steps=2"]
    pinned = [a for a in argv if a.startswith("hydra.run.dir=")]
    assert len(pinned) == 1 and _value(pinned[0]) == str(run_dir)


def test_a_plain_path_stays_readable() -> None:
    assert override("hydra.run.dir", "outputs/runs/x-1") == "hydra.run.dir=outputs/runs/x-1"
    assert resume_command([], "outputs/runs/x") == "python -m vtlab hydra.run.dir=outputs/runs/x"
    assert shell_line(["reuse_runs=['/a b']"]) == "\"reuse_runs=['/a b']\""


@given(st.lists(st.text(st.characters(exclude_categories=["Cs", "Cc"]), min_size=1), min_size=1, max_size=4))
def test_shell_line_splits_back_into_its_words(words: list[str]) -> None:
    assert shlex.split(shell_line(words)) == words


@given(st.text(st.characters(exclude_categories=["Cs", "Cc"]), min_size=1))
def test_a_quoted_value_and_list_parse_back_as_themselves(value: str) -> None:
    assert _value(override("hydra.run.dir", value)) == value
    assert _value(f"reuse_runs={quoted_list([value, value + 'x'])}") == [value, value + "x"]


def test_reproduce_prints_commands_that_parse_back_with_an_awkward_out_dir(tmp_path: Path, capsys) -> None:
    from vtlab.reproduce import main

    out = tmp_path / "it's a,b=c"
    assert main(["--dry-run", "--tables", "real-case", "--out", str(out)]) == 0
    lines = [line[2:] for line in capsys.readouterr().out.splitlines() if line.startswith("+ ")]
    assert lines
    for line in lines:
        overrides = shlex.split(line)[3:]  # python -m vtlab
        assert overrides[0] == "-m"
        # a dry run cannot know the rate the MLM rule will choose: it names it <chosen>
        parsed = {o.split("=", 1)[0]: _value(o) for o in overrides[1:] if "<chosen>" not in o}
        assert Path(str(parsed["hydra.sweep.dir"])).parent == out
        for key in ("reuse_runs", "hydra.searchpath"):
            for path in parsed.get(key) or []:
                assert str(path).removeprefix("file://").startswith(str(out.resolve())), (key, path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("model.optimizer.lr=6e-05", 6e-05), ("lr=0.0003", 0.0003), ("a=null", None), ("a=[1,2]", [1, 2])],
)
def test_an_override_value_reads_as_hydra_reads_it(text, expected):
    import yaml

    got = value(text)
    assert got == expected and type(got) is type(expected)
    # the trap the rule avoids: YAML 1.1 (PyYAML) reads an exponent without a dot as a string
    assert yaml.safe_load("6e-05") == "6e-05"
