"""What runs leave and print: a local sweep's jobs each get their own wandb run (one group per sweep), a failed run's
wandb run ends with its exit code, runs are named after what ran, an export from a run records itself inside that
run, and output that is not a terminal holds no redrawn progress frames or library chatter."""

from __future__ import annotations

import json
import struct
import subprocess
import time
from pathlib import Path

import pytest
import wandb
from helpers import compose_config, run_vtlab
from omegaconf import open_dict
from pytorch_lightning.loggers import WandbLogger
from wandb.proto import wandb_internal_pb2

from vtlab.core.errors import VtlabError
from vtlab.stages.pipeline import run
from vtlab.tracking.loggers import configured_loggers

# job 0 evaluates only (its loggers come from the config), job 1 trains two steps first (the trainer's loggers)
_SWEEP = [
    "stage=evaluate,all",
    "backbone=splade-tiny",
    "vocab=native",
    "apc=off",
    "baseline=false",
    "eval=boolq",
    "data=boolq",
    "trainer.max_steps=2",
    "trainer.val_check_interval=2",
    "trainer.log_every_n_steps=1",
    "data.batch_size=4",
    "data.doc_max_length=64",
    "data.dev.dev_size=20",
    "data.dev.max_docs=100",
    "+eval.collection.max_queries=20",
    "+eval.collection.max_docs=60",
]


# ---- reading an offline wandb run: its .wandb file is a LevelDB-style log of protobuf records ----------------------


def wandb_records(run_dir: Path) -> list:
    """The records of the offline run in `run_dir` (wandb/offline-run-*/run-*.wandb), in order."""
    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data, block, header = path.read_bytes(), 32768, 7
    assert data[:4] == b":W&B", path
    records, pos, chunk = [], header, b""
    while pos + header <= len(data):
        if block - pos % block < header:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + header])
        if kind == 0:  # zero padding up to the next block
            pos += block - pos % block
            continue
        chunk += data[pos + header : pos + header + length]
        pos += header + length
        if kind in (1, 4):  # a full record, or the last part of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            records.append(record)
            chunk = b""
    return records


def wandb_run(run_dir: Path) -> dict:
    """The run's identity, final config, summary values and history keys, how often a results table was logged, and
    its exit code."""
    out: dict = {"config": {}, "summary": {}, "history": set(), "tables": 0, "exit": None}
    for r in wandb_records(run_dir):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            out.update(id=r.run.run_id, name=r.run.display_name, group=r.run.run_group, job_type=r.run.job_type)
        elif kind == "config":
            out["config"].update({u.key: json.loads(u.value_json) for u in r.config.update if u.key})
        elif kind == "summary":
            out["summary"].update({u.key: json.loads(u.value_json) for u in r.summary.update if u.key})
        elif kind == "history":
            keys = {"/".join(i.nested_key) or i.key for i in r.history.item}
            out["history"] |= keys
            out["tables"] += any(k.startswith("eval/results") for k in keys)
        elif kind == "exit":
            out["exit"] = r.exit.exit_code
    return out


# ---- a two-job local sweep, output piped -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, fresh_cache) -> tuple[Path, subprocess.CompletedProcess]:
    """Hydra's basic launcher runs both jobs in one process; stdout and stderr are pipes (as under SLURM). A fresh
    cache, so the data building (BM25 mining, model loading) prints whatever it prints."""
    sweep_dir = tmp_path_factory.mktemp("sweep") / "sweep"
    res = run_vtlab("-m", *_SWEEP, f"hydra.sweep.dir={sweep_dir}", timeout=600, text=False)
    # decoded here: text=True would turn the carriage returns this module looks for into newlines
    res.stdout, res.stderr = res.stdout.decode(errors="replace"), res.stderr.decode(errors="replace")
    assert res.returncode == 0, res.stderr[-3000:]
    return sweep_dir, res


@pytest.mark.cli
def test_each_sweep_job_logs_its_own_wandb_run(sweep):
    sweep_dir, _ = sweep
    runs = {job: wandb_run(sweep_dir / job) for job in ("0", "1")}  # exactly one offline run in each job dir
    assert runs["0"]["id"] != runs["1"]["id"]
    for job, stage in (("0", "evaluate"), ("1", "all")):
        r = runs[job]
        assert r["job_type"] == stage and r["config"]["stage"]["name"] == stage
        assert r["name"] == r["config"]["name"] == f"{stage}-splade-tiny-native-boolq"  # the data in the name
        assert r["group"] == str(sweep_dir)  # one group per sweep
        assert r["exit"] == 0 and r["tables"] == 1  # finished, with its own results table only
        metrics = json.loads((sweep_dir / job / "eval" / "boolq" / "metrics.json").read_text())["metrics"]
        assert r["summary"]["eval/boolq/nDCG@10"] == pytest.approx(metrics["nDCG@10"])
        assert r["summary"]["eval/boolq/doc_active_dims"] == pytest.approx(metrics["doc_active_dims"])
    assert "train/loss" in runs["1"]["history"] and "train/loss" not in runs["0"]["history"]


@pytest.mark.cli
def test_piped_output_has_progress_lines_and_no_frames_or_chatter(sweep):
    _, res = sweep
    out = res.stdout + res.stderr
    unwanted = [
        s
        for s in ("\r", "Epoch 0/-2", "Loading weights", "Writing model shards", "litlogger", "_pytree", "DEBUG")
        if s in out
    ]
    assert not unwanted, f"{unwanted} in the output:\n{out[-3000:]}"
    assert "train: step 1/2 (50%) · loss " in res.stdout and "train: step 2/2 (100%) · loss " in res.stdout


# ---- a failed run ----------------------------------------------------------------------------------------------------


def _log_then_fail(cfg, state):
    next(lg for lg in configured_loggers(cfg) if isinstance(lg, WandbLogger)).experiment.log({"probe": 1.0})
    raise RuntimeError("a bug in a stage")


def _log_then_refuse(cfg, state):
    next(lg for lg in configured_loggers(cfg) if isinstance(lg, WandbLogger)).experiment.log({"probe": 1.0})
    raise VtlabError("a user error")


@pytest.mark.train
@pytest.mark.parametrize("step,error,code", [("_log_then_fail", RuntimeError, 1), ("_log_then_refuse", VtlabError, 2)])
def test_a_failed_run_finishes_its_wandb_run_with_its_exit_code(tmp_path, step, error, code):
    cfg = compose_config([f"paths.run_dir={tmp_path}", "stage=evaluate", "backbone=splade-tiny", "vocab=native"])
    with open_dict(cfg):
        cfg.stage.steps = [{"_target_": f"test_run_output.{step}", "_partial_": True}]
    with pytest.raises(error):
        run(cfg)
    assert wandb.run is None  # ended: the next run in this process gets its own
    deadline = time.monotonic() + 30
    while (r := wandb_run(tmp_path))["exit"] is None and time.monotonic() < deadline:
        time.sleep(0.1)  # wandb's service writes the run's last records just after finish() returns
    assert r["exit"] == code and "probe" in r["history"]
    assert r["name"] == r["group"] == "evaluate-splade-tiny-native-boolq-clean"  # a single run: its own group


# ---- names and directories -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides,name",
    [
        ([], "all-splade-tiny-corpus-wordpiece-boolq-clean"),
        (["stage=evaluate", "vocab=native"], "evaluate-splade-tiny-native-boolq-clean"),
        (["stage=export", "backbone=tiny-modernbert"], "export-tiny-modernbert-corpus-wordpiece-boolq-clean"),
        (["eval=beir", "eval.path=/data/pydocs/"], "all-splade-tiny-corpus-wordpiece-pydocs"),  # your own data
        (["eval=none"], "all-splade-tiny-corpus-wordpiece"),
        (["stage=transfer", "name=mine"], "mine"),
        (["experiment=quickstart"], "quickstart"),
    ],
)
def test_runs_are_named_after_what_runs(tmp_path, overrides, name):
    assert compose_config([*overrides, f"paths.run_dir={tmp_path}"]).name == name


@pytest.mark.cli
def test_export_from_a_run_records_itself_inside_that_run(sweep, tmp_path):
    """stage=export run_dir=R writes into R, and its own record (.hydra/, log, status.json) goes to R/exports/<time>,
    not to a new outputs/runs/<time>-<name> directory beside R that would hold nothing else."""
    trained = sweep[0] / "1"
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"_id": f"d{i}", "text": t}) + "\n"
            for i, t in enumerate(["sparse retrieval", "vocabulary transfer"])
        )
    )
    res = run_vtlab(
        "stage=export",
        f"run_dir={trained}",
        "logger=none",
        "export.sentence_transformers=false",
        "export.vectors.formats=[anserini]",
        f"export.vectors.corpus={corpus}",
        cwd=tmp_path,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert len((trained / "vectors" / "anserini" / "docs.jsonl").read_text().splitlines()) == 2
    assert not (tmp_path / "outputs").exists()
    (record,) = (trained / "exports").iterdir()
    assert json.loads((record / "status.json").read_text())["status"] == "done"
    assert "stage=export" in (record / ".hydra" / "overrides.yaml").read_text()
    assert (trained / ".hydra" / "overrides.yaml").read_text().count("stage=all") == 1  # R's own record untouched
