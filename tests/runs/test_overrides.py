"""A misspelt key or an unknown group choice (vtlab/runs/overrides.py): one `vtlab: error:` line naming it with the
closest valid keys or choices, exit 2, before Hydra composes or any model loads, and no run directory made."""

import resource

import pytest
from helpers import CONF, run_vtlab

from vtlab.runs.overrides import bad_override, command_line_overrides


@pytest.mark.cli
@pytest.mark.parametrize(
    "override,expected",
    [
        (
            "regularizer.doc.weigth=1e-3",
            "regularizer.doc.weigth: no such config key (did you mean regularizer.doc.weight",
        ),
        ("vocab=bert-uncasd", "vocab=bert-uncasd: no such choice in conf/vocab/ (did you mean vocab=bert-uncased?)"),
    ],
)
def test_the_cli_names_the_key_and_the_closest_valid_one(tmp_path, override, expected):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = run_vtlab(override, cwd=tmp_path, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and proc.stderr.startswith(
        f"vtlab: error: {expected}"
    )
    assert "+" not in proc.stderr  # never the advice to add the misspelt key
    assert list(tmp_path.iterdir()) == []  # no outputs/ made: Hydra never ran
    # no model was loaded (a run's start alone takes longer); CPU seconds, the same on a loaded machine
    assert (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime) < 30


def test_group_choices_sweeps_and_nested_keys_are_checked_as_composed():
    assert bad_override(["experiment=testbed/main/wp-nativ"], CONF).startswith(
        "experiment=testbed/main/wp-nativ: no such choice in conf/experiment/ (did you mean "
        "experiment=testbed/main/wp-native"
    )
    assert "did you mean trainer.max_steps" in bad_override(["-m", "trainer.max_step=3,4"], CONF)
    assert "vocab=nativ" in bad_override(["-m", "vocab=native,nativ"], CONF)  # every value of a sweep
    # keys that exist only once an experiment is composed are found in it
    assert bad_override(["experiment=testbed/main/wp-native", "selection.grid.model.optimizer.lr=[1e-4]"], CONF) is None
    assert bad_override(["selection.seed=1"], CONF) is not None  # no selection node without the experiment
    # valid lines, additions on purpose, deletions, Hydra's own keys and help flags are left to Hydra
    for argv in (
        ["mlm.steps=100", "seed=3"],
        ["+foo.bar=1"],
        ["~logger"],
        ["hydra/launcher=slurm", "hydra.launcher.tasks_per_node=8"],
        ["--help"],
        ["vocab=null"],
    ):
        assert bad_override(argv, CONF) is None, argv


def test_config_directories_added_with_searchpath_extend_choices_and_keys(tmp_path):
    (tmp_path / "loss").mkdir()
    (tmp_path / "loss" / "hinge.yaml").write_text("_target_: mylosses.Hinge\nmargin: 2.0\n")
    added = f"hydra.searchpath=[file://{tmp_path}]"
    assert bad_override([added, "loss=hinge", "loss.margin=3"], CONF) is None
    assert bad_override([added, "loss=hinge", "loss.margn=3"], CONF) == (
        "loss.margn: no such config key (did you mean loss.margin?)"
    )
    assert bad_override(["loss=hinge"], CONF).startswith("loss=hinge: no such choice in conf/loss/")


def test_flags_and_their_values_are_not_overrides():
    assert command_line_overrides(["-m", "--cfg", "job", "a=1", "-p", "model", "b=2"]) == ["a=1", "b=2"]
    assert command_line_overrides(["--info", "a=1"]) is None


@pytest.mark.parametrize(
    "override,shown",
    [
        ("name=a\x1b[31mb", "name=a\\x1b[31mb: holds a control or format character (\\x1b at position 7)"),
        ("name=a\u202eb", "name=a\\u202eb: holds a control or format character (\\u202e at position 7)"),
        ("eval.path=/tmp/x\x07y", "eval.path=/tmp/x\\x07y: holds a control or format character (\\x07 at position 17)"),
        ("seed=1\u200b", "seed=1\\u200b: holds a control or format character (\\u200b at position 7)"),
    ],
)
def test_a_control_or_bidirectional_character_is_named_escaped_never_echoed(override: str, shown: str) -> None:
    line = bad_override([override], CONF)
    assert line is not None and line.startswith(shown)
    assert line.isascii() and line.isprintable()


def test_every_error_line_shows_such_characters_escaped() -> None:
    from vtlab.core.errors import VtlabError, one_line

    line = one_line(VtlabError("/data/\x1b]0;pwned\x07/queries.jsonl: line 3: \u2066odd\u2069"))
    assert line == "vtlab: error: /data/\\x1b]0;pwned\\x07/queries.jsonl: line 3: \\u2066odd\\u2069"
    assert one_line(VtlabError("naïve café: ok")) == "vtlab: error: naïve café: ok"  # letters stay letters
