"""The paper's recipe is the same on 1, 2 or 8 GPUs: every main row composed with paper.gpus = 1, 2 and 8 trains the
fine-tune on the paper's global batch (data.batch_size × trainer.accumulate_grad_batches × devices × nodes), each
forward pass at the authors' per-device batch (the cached loss above it), and every row with MLM adapts on the
authors' 2048 spans per step (mlm.batch_size × mlm.accumulate_grad_batches × devices × nodes). A GPU count that does
not divide them is refused in one line; the documented commands are the ones composed here."""

from __future__ import annotations

import re

import pytest
from helpers import CONF, ROOT, compose_config
from omegaconf import DictConfig

from vtlab.core.errors import ConfigError
from vtlab.core.paths import CONF_DIR
from vtlab.runs.checks import check_config
from vtlab.runs.precheck import checked

ROWS = sorted(p.stem for p in (CONF / "experiment" / "paper" / "main").glob("*.yaml"))
MLM_GLOBAL_BATCH = 2048  # the authors' run_vt.sh: 64 per device × 4 × 8 GPUs
FINE_TUNE_GLOBAL_BATCH = {"inference-free": 160}  # c_doc.yaml: 20 × 8; every other row c.yaml's 16 × 8 = 128
RUN_DIR = "paths.run_dir=/tmp/vtlab-paper-gpus"


def _row(row: str, *extra: str) -> DictConfig:
    return compose_config([RUN_DIR, f"experiment=paper/main/{row}", *extra])


def _fine_tune_batch(row: str) -> int:
    return next((b for suffix, b in FINE_TUNE_GLOBAL_BATCH.items() if row.endswith(suffix)), 128)


def _globals(cfg: DictConfig) -> tuple[int, int]:
    """(the fine-tune's global batch, the MLM's) as the Trainers see them."""
    t, m = cfg.trainer, cfg.mlm
    gpus = t.devices * t.num_nodes
    return cfg.data.batch_size * t.accumulate_grad_batches * gpus, m.batch_size * m.accumulate_grad_batches * gpus


@pytest.mark.parametrize("gpus", [1, 2, 8])
@pytest.mark.parametrize("row", ROWS)
def test_every_row_keeps_the_papers_global_batches_on_any_gpu_count(row: str, gpus: int) -> None:
    cfg = _row(row, f"paper.gpus={gpus}")
    check_config(cfg)
    fine_tune, mlm = _globals(cfg)
    assert cfg.trainer.devices == gpus and cfg.trainer.num_nodes == 1
    assert fine_tune == cfg.paper.global_batch == _fine_tune_batch(row), (row, gpus)
    assert cfg.trainer.accumulate_grad_batches == 1  # the loss and FLOPS see the whole batch in one step
    # each forward pass holds the authors' per-device batch: one pass at 8 GPUs, the cached loss below
    per_forward = min(cfg.data.batch_size, cfg.model.cached_mini_batch or cfg.data.batch_size)
    assert per_forward == cfg.paper.device_batch == _fine_tune_batch(row) // 8
    assert (cfg.model.cached_mini_batch is None) == (gpus == 8)
    if cfg.mlm.steps > 0:
        assert mlm == cfg.paper.mlm_global_batch == MLM_GLOBAL_BATCH, (row, gpus)
        assert cfg.mlm.batch_size == 64  # per device, the authors'


def test_the_rows_with_mlm_are_the_ones_compared_at_vts_compute() -> None:
    with_mlm = {row for row in ROWS if _row(row).mlm.steps > 0}
    assert {"modernbert-vt", "modernbert-native-mlm", "modernbert-lowercase-masked-mlm", "roberta-large-vt"} <= with_mlm
    assert "bert-native" not in with_mlm


def test_the_mlm_ablation_sweep_keeps_the_mlm_batch() -> None:
    cfg = compose_config([RUN_DIR, "experiment=paper/ablation-mlm", "paper.gpus=2", "mlm.steps=500"])
    assert _globals(cfg) == (128, MLM_GLOBAL_BATCH)


@pytest.mark.parametrize("gpus", [3, 6, 64])
def test_a_gpu_count_that_does_not_divide_the_batches_is_one_line(gpus: int) -> None:
    cfg = _row("modernbert-vt", f"paper.gpus={gpus}")
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    assert str(err.value).startswith(f"paper.gpus={gpus} ") and "1, 2, 4, 8, 16, 32" in str(err.value)
    problem, composed = checked(["experiment=paper/main/modernbert-vt", f"++paper.gpus={gpus}"], CONF_DIR)
    assert composed is None and problem is not None and "\n" not in problem
    assert problem.startswith(f"paper.gpus={gpus} ") and "hydra.launcher.gpus_per_node=N" in problem


def test_a_count_the_fine_tune_divides_but_the_mlm_does_not_is_refused_only_with_mlm() -> None:
    check_config(_row("bert-native", "paper.gpus=64"))  # 128 / 64 = 2 queries per GPU; no MLM
    with pytest.raises(ConfigError, match=r"paper.mlm_global_batch=2048 of mlm.batch_size=64 per GPU"):
        check_config(_row("modernbert-vt", "paper.gpus=64"))  # 2048 spans / (64 × 64): no whole accumulation


def test_devices_that_name_no_count_are_refused_at_paper_scale() -> None:
    with pytest.raises(ConfigError, match=r"trainer.devices='auto'.*\+\+paper.gpus=N"):
        check_config(_row("modernbert-vt", "trainer.devices=auto"))


def _documented_gpu_commands() -> list[str]:
    text = (ROOT / "docs" / "paper-scale.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [ln.split("  #")[0].strip() for b in blocks for ln in b.splitlines() if "paper.gpus=" in ln]


def test_the_documented_commands_for_1_2_and_8_gpus_compose_to_the_papers_batches() -> None:
    commands = _documented_gpu_commands()
    counts = {int(re.search(r"paper\.gpus=(\d+)", c).group(1)) for c in commands}
    assert counts >= {1, 2, 8}, commands
    for command in commands:
        args = command.split()[3:]
        assert not any(a.startswith(("data.batch_size", "mlm.accumulate", "trainer.accumulate")) for a in args)
        launcher = [a for a in args if a.startswith("hydra.launcher.gpus_per_node=")]
        gpus = int(re.search(r"paper\.gpus=(\d+)", command).group(1))
        assert all(a.endswith(f"={gpus}") for a in launcher), command
        jobs = [a for a in args if not a.startswith(("-m", "hydra"))]  # a job's own overrides
        cfg = compose_config([RUN_DIR, *(a.split(",")[0] for a in jobs)])
        assert _globals(cfg) == (128, MLM_GLOBAL_BATCH), command
