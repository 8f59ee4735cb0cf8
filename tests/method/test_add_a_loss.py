"""docs/architecture.md's recipe for a new loss, followed from outside the repository: a module of one's own with a
RankingLoss subclass, a conf/loss/<name>.yaml in a config directory of one's own added with hydra.searchpath, and
`loss=<name>` on the command line trains with it."""

import json

import pytest
from helpers import child_env, run_vtlab

pytestmark = pytest.mark.cli

LOSS = '''
import torch.nn.functional as F

from vtlab.losses.base import RankingLoss, group_scores


class Hinge(RankingLoss):
    """Each negative kept `margin` below the positive."""

    def __init__(self, margin: float = 1.0, gather: bool = True) -> None:
        super().__init__(gather)
        self.margin = margin

    def forward(self, q, d, teacher_scores=None):
        q, d, _ = self.gathered(q, d, teacher_scores)
        s = group_scores(q, d)
        return F.relu(self.margin - (s[:, :1] - s[:, 1:])).mean()
'''


def test_a_loss_added_through_conf_alone_trains(tmp_path):
    (tmp_path / "mylosses").mkdir()
    (tmp_path / "mylosses" / "__init__.py").write_text(LOSS)
    (tmp_path / "conf" / "loss").mkdir(parents=True)
    (tmp_path / "conf" / "loss" / "hinge.yaml").write_text("_target_: mylosses.Hinge\nmargin: 2.0\n")
    run = tmp_path / "run"
    proc = run_vtlab(
        "stage=finetune",
        "backbone=splade-tiny",
        "vocab=native",
        "apc=off",
        "logger=csv",
        "loss=hinge",
        "trainer.max_steps=3",
        "trainer.val_check_interval=3",
        "trainer.log_every_n_steps=1",
        "data.batch_size=2",
        "data.doc_max_length=32",
        "data.dev.dev_size=10",
        "data.dev.max_docs=50",
        f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
        f"hydra.run.dir={run}",
        env=child_env(tmp_path),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = (run / ".hydra" / "config.yaml").read_text()
    assert "_target_: mylosses.Hinge" in config and "margin: 2.0" in config
    assert json.loads((run / "status.json").read_text())["status"] == "done"
    assert (run / "checkpoints" / "last.ckpt").is_file()
