"""Nothing on disk runs code: crafted checkpoints, planted native kernels, remote code and foreign configs are refused
(or rebuilt) with one line, and the tests check with real crafted files that nothing of them ran."""

from __future__ import annotations

import copy
import functools
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from helpers import ROOT, child_env, run_vtlab
from torch import nn

from vtlab.bench.tiny_runs import TINY_FINETUNE
from vtlab.core.errors import RunDirError, user_error
from vtlab.runs.directory import LAST_CKPT


class _RunsCode:
    """Unpickling this runs `touch <marker>`: what a crafted checkpoint does to whoever loads it with pickle."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _crafted_checkpoint(path: Path, marker: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {"w": torch.zeros(2)}, "global_step": 3, "payload": _RunsCode(marker)}, path)
    return path


# ---- checkpoints ---------------------------------------------------------------------------------------------


def test_the_crafted_checkpoint_runs_code_when_unpickled(tmp_path: Path) -> None:
    """The control: the crafted file is real (plain unpickling creates the marker), so its absence below means
    something."""
    ckpt = _crafted_checkpoint(tmp_path / "last.ckpt", tmp_path / "ran")
    torch.load(ckpt, weights_only=False)
    assert (tmp_path / "ran").exists()


def test_crafted_checkpoint_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    from vtlab.callbacks.checkpoints import check_checkpoint_fits, load_checkpoint

    ckpt = _crafted_checkpoint(tmp_path / "last.ckpt", tmp_path / "ran")
    for load in (lambda: load_checkpoint(ckpt), lambda: check_checkpoint_fits(ckpt, nn.Linear(2, 1))):
        with pytest.raises(RunDirError) as ei:
            load()
        msg = str(ei.value)
        assert "\n" not in msg and user_error(ei.value) is ei.value
        assert msg.startswith(f"{ckpt}: refused to load the checkpoint: it asks to import posix.system"), msg
    assert not (tmp_path / "ran").exists()


@pytest.mark.train
def test_a_real_vtlab_checkpoint_needs_no_global_beyond_the_allow_list(tmp_path: Path) -> None:
    """What vtlab writes (Lightning state, the RNG streams of ResumeState, the last/best checkpoint callbacks, an
    optimizer and a scheduler) loads weights-only: nothing outside CHECKPOINT_GLOBALS; and Lightning resumes from it."""
    from vtlab.callbacks.checkpoints import CHECKPOINT_GLOBALS, SameDirCheckpointIO, load_checkpoint
    from vtlab.callbacks.last_checkpoint import LastCheckpoint
    from vtlab.callbacks.resume_state import ResumeState

    class Toy(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.lin(batch[0]).sum()

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=0.1)
            from transformers import get_linear_schedule_with_warmup

            return [opt], [{"scheduler": get_linear_schedule_with_warmup(opt, 1, 10), "interval": "step"}]

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=2)

    def trainer(steps: int) -> pl.Trainer:
        return pl.Trainer(
            max_steps=steps,
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            callbacks=[LastCheckpoint(str(tmp_path), every_n_train_steps=1), ResumeState()],
            plugins=[SameDirCheckpointIO()],
            default_root_dir=str(tmp_path),
        )

    trainer(3).fit(Toy(), data)
    last = tmp_path / "last.ckpt"
    assert set(torch.serialization.get_unsafe_globals_in_checkpoint(str(last))) <= {
        f"{g.__module__}.{g.__qualname__}" for g in CHECKPOINT_GLOBALS
    }
    assert load_checkpoint(last)["global_step"] == 3
    resumed = trainer(5)
    resumed.fit(Toy(), data, ckpt_path=str(last), weights_only=True)
    assert resumed.global_step == 5


@pytest.mark.cli
@pytest.mark.slow
def test_rerun_with_a_crafted_last_ckpt_refuses_with_one_line(tmp_path: Path) -> None:
    """The attack from the issue: a colleague's (or anyone's) run dir holds a crafted last.ckpt; rerunning the same
    command (resume=auto) must not run it."""
    run_dir, marker = tmp_path / "run", tmp_path / "ran"
    _crafted_checkpoint(run_dir / LAST_CKPT, marker)
    res = run_vtlab(*TINY_FINETUNE, "stage=finetune", f"hydra.run.dir={run_dir}", timeout=600)
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"vtlab: error: {run_dir / LAST_CKPT}: refused to load the checkpoint: it asks to import posix.system"
    ), res.stderr[-3000:]
    assert not marker.exists()


# ---- the native kernel -----------------------------------------------------------------------------------------

needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler")

_LOAD = textwrap.dedent("""
    import logging, sys
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    import numpy as np, scipy.sparse as sp
    from vtlab.index import native
    from vtlab.index.inverted import InvertedIndex
    lib = native.load()
    print("LIB", None if lib is None else lib._name)
    d = sp.random(30, 50, density=0.2, format="csr", dtype=np.float32, random_state=0)
    q = sp.random(4, 50, density=0.3, format="csr", dtype=np.float32, random_state=1)
    index = InvertedIndex(d)
    s, i = index.search(q, 3)
    ref = -np.sort(-(q.astype(np.float64) @ d.T.astype(np.float64)).toarray(), axis=1)[:, :3]  # brute force
    print("BACKEND", index.backend, "EQUAL", bool(np.allclose(s, ref, rtol=1e-5, atol=1e-6)))
""")


def _load_in_subprocess(cache: Path, **env: str) -> subprocess.CompletedProcess:
    """native.load() in a fresh process (a bad library could kill it: SIGBUS) with VTLAB_CACHE=cache."""
    return subprocess.run(
        [sys.executable, "-c", _LOAD],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(VTLAB_CACHE=str(cache), **env),
    )


def _built(cache: Path) -> Path:
    res = _load_in_subprocess(cache)
    assert res.returncode == 0 and "BACKEND native EQUAL True" in res.stdout, res.stdout + res.stderr
    return Path(res.stdout.split("LIB ", 1)[1].split()[0])


def _planted_library(tmp: Path, marker: Path) -> Path:
    """A shared library whose constructor creates `marker` as soon as anything loads it."""
    src = tmp / "evil.c"
    src.write_text(
        textwrap.dedent(f"""
        #include <stdio.h>
        __attribute__((constructor)) static void planted(void) {{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}
        long vt_taat_topk(void) {{ return 0; }}
    """)
    )
    out = tmp / "evil.so"
    subprocess.run([shutil.which("cc") or "gcc", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out


@pytest.mark.cli
@needs_cc
def test_planted_library_is_never_loaded(tmp_path: Path) -> None:
    cache, marker = tmp_path / "cache", tmp_path / "ran"
    lib = _built(cache)
    evil = _planted_library(tmp_path, marker)
    # the control: loading the planted library does run its constructor
    subprocess.run([sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(evil)!r})"], check=True)
    assert marker.exists()
    marker.unlink()
    # planted over the built kernel (its recorded sha256 then differs), and at the old shared location
    shutil.copyfile(evil, lib)
    shutil.copyfile(evil, cache / "native" / lib.name)
    res = _load_in_subprocess(cache)
    assert res.returncode == 0, res.stderr
    assert not marker.exists()
    assert "BACKEND native EQUAL True" in res.stdout, res.stdout + res.stderr  # rebuilt, and right
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("WARNING")]
    assert warnings == [
        f"WARNING exact-search kernel {lib} is not loaded (its sha256 differs from the one recorded "
        f"at build time in {lib.name}.sha256): rebuilding it"
    ], res.stderr
    assert lib.read_bytes() != evil.read_bytes()


@pytest.mark.cli
@needs_cc
def test_planted_library_with_matching_hash_in_a_directory_others_could_write(tmp_path: Path) -> None:
    """Someone who could write the directory could also write the hash: such a directory is emptied, not trusted."""
    import hashlib

    cache, marker = tmp_path / "cache", tmp_path / "ran"
    lib = _built(cache)
    evil = _planted_library(tmp_path, marker)
    shutil.copyfile(evil, lib)
    Path(f"{lib}.sha256").write_text(hashlib.sha256(evil.read_bytes()).hexdigest() + "\n")
    os.chmod(lib.parent, 0o777)
    res = _load_in_subprocess(cache)
    assert res.returncode == 0 and "BACKEND native EQUAL True" in res.stdout, res.stdout + res.stderr
    assert not marker.exists()
    assert (lib.parent.stat().st_mode & 0o777) == 0o700
    assert [ln for ln in res.stderr.splitlines() if ln.startswith("WARNING")] == [
        f"WARNING {lib.parent} was open to other users (mode 777): its contents are discarded and it is made 0700"
    ]


@pytest.mark.cli
@needs_cc
def test_truncated_library_is_rebuilt_or_falls_back_to_scipy_without_sigbus(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    lib = _built(cache)
    good = lib.read_bytes()
    lib.write_bytes(good[: len(good) // 3])
    res = _load_in_subprocess(cache)
    assert res.returncode == 0, res.stderr  # not -SIGBUS
    assert "BACKEND native EQUAL True" in res.stdout and "rebuilding it" in res.stderr, res.stdout + res.stderr
    # truncated again, and this time no compiler can rebuild it: scipy, one warning, same results
    lib.write_bytes(good[: len(good) // 3])
    res = _load_in_subprocess(cache, PATH="/nonexistent", CC="")
    assert res.returncode == 0, res.stderr
    assert "LIB None" in res.stdout and "BACKEND scipy EQUAL True" in res.stdout, res.stdout + res.stderr


def test_kernel_directory_of_another_user_is_not_used(tmp_path: Path, monkeypatch) -> None:
    from vtlab.index import native

    monkeypatch.setenv("VTLAB_CACHE", str(tmp_path))
    other = tmp_path / "native" / f"uid{os.getuid() + 1}"
    other.mkdir(parents=True, mode=0o700)
    monkeypatch.setattr(os, "getuid", lambda: os.stat(tmp_path).st_uid + 1)  # the directory belongs to someone else
    with pytest.raises(native.UntrustedDir, match=r"is not a directory owned by uid \d+ \(owner uid \d+\)"):
        native.private_dir()


# ---- a model's own Python code (trust_remote_code) -------------------------------------------------------------


def _model_dir_with_code(tmp: Path, marker: Path) -> Path:
    """A model directory whose config.json asks transformers to import configuration_evil.py, which creates `marker`
    when imported."""
    d = tmp / "model-with-code"
    d.mkdir()
    (d / "config.json").write_text(
        '{"model_type": "evil", "vocab_size": 10, "auto_map": {"AutoConfig": '
        '"configuration_evil.EvilConfig", "AutoModelForMaskedLM": "modeling_evil.EvilLM"}}'
    )
    code = (
        f"import pathlib\npathlib.Path({str(marker)!r}).touch()\nfrom transformers import PretrainedConfig\n"
        "class EvilConfig(PretrainedConfig):\n    model_type = 'evil'\n"
    )
    (d / "configuration_evil.py").write_text(code)
    (d / "modeling_evil.py").write_text(code)
    return d


def test_a_model_directory_with_code_is_refused_without_the_opt_in(tmp_path: Path) -> None:
    from vtlab.backbones import Backbone
    from vtlab.core.errors import AssetError

    marker = tmp_path / "ran"
    d = _model_dir_with_code(tmp_path, marker)
    with pytest.raises(AssetError) as plain:  # a backbone config that does not ask for remote code
        Backbone(str(d)).load_model()
    assert str(plain.value) == (
        f"backbone.name_or_path={str(d)!r} contains its own Python code (configuration_evil.EvilConfig, "
        "modeling_evil.EvilLM), which vtlab does not import: use a model that needs none, or set trust_remote_code: "
        "true in its backbone config and pass backbone.allow_remote_code=true after reading that code"
    )
    with pytest.raises(AssetError) as asked:  # one that does (gte-multilingual), without this run's opt-in
        Backbone(str(d), trust_remote_code=True).load_tokenizer()
    assert str(asked.value).startswith(
        f"backbone.name_or_path={str(d)!r} needs its own Python code (the backbone "
        "config sets trust_remote_code: true), which vtlab does not import unless "
        "this run opts in: pass backbone.allow_remote_code=true"
    )
    assert not marker.exists()


@pytest.mark.cli
def test_the_opt_in_prints_what_it_imports_and_then_imports_it(tmp_path: Path) -> None:
    """The control for the test above (the crafted code is real and runs once allowed), in its own process with its
    own transformers module cache."""
    marker = tmp_path / "ran"
    d = _model_dir_with_code(tmp_path, marker)
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            "from vtlab.backbones import Backbone\n"
            f"Backbone({str(d)!r}, trust_remote_code=True, allow_remote_code=True)._load("
            "__import__('transformers').AutoConfig.from_pretrained, "
            f"{str(d)!r}, 'backbone.name_or_path')",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(HF_MODULES_CACHE=str(tmp_path / "modules")),
    )
    assert res.returncode == 0, res.stderr
    assert (
        f"vtlab: backbone.allow_remote_code=true: importing the Python code of backbone.name_or_path={d}: "
        "configuration_evil.EvilConfig, modeling_evil.EvilLM"
    ) in res.stderr.splitlines()
    assert marker.exists()


def test_gte_multilingual_needs_the_per_run_opt_in() -> None:
    from helpers import compose_config
    from hydra.utils import instantiate

    default = instantiate(compose_config(["backbone=gte-multilingual"]).backbone)
    opted = instantiate(compose_config(["backbone=gte-multilingual", "backbone.allow_remote_code=true"]).backbone)
    assert (default.trust_remote_code, default.allow_remote_code) == (True, False)
    assert (opted.trust_remote_code, opted.allow_remote_code) == (True, True)


# ---- configs read from another run's directory (stage=export run_dir=X) ----------------------------------------
#
# `stage=export run_dir=R` instantiates R's recorded model.encoder and eval nodes. Each attack below is a crafted
# .hydra/config.yaml in a run directory with a real model/: its payload creates `marker` when Hydra instantiates it
# (the control test shows it does), and export must refuse it in one line naming the file and the key, with the
# marker absent and no file written.


@dataclass(frozen=True)
class _Attack:
    node: str  # the recorded node export reads: model.encoder or eval
    key: str  # where under it the payload sits
    payload: Callable[[Path, Path], dict]  # (tmp dir, marker) -> a node that creates marker when instantiated
    refused: str  # the error line after "<file> (<node>): <key>."
    via: str | None = None  # a top-level key holding the payload, reached by an interpolation


def _torch_load_of_a_written_pickle(tmp: Path, marker: Path) -> dict:
    """torch.load (reached as vtlab.callbacks.checkpoints.torch.load) with weights_only false, of a protocol-0 pickle
    that a nested vtlab.core.atomic.atomic_write_text writes first: a YAML file alone runs `touch marker`."""
    pickle_text = pickle.dumps(_RunsCode(marker), protocol=0).decode("ascii")
    return {
        "_target_": "vtlab.callbacks.checkpoints.torch.load",
        "weights_only": False,
        "f": {
            "_target_": "vtlab.core.atomic.atomic_write_text",
            "path": str(tmp / "payload.pkl"),
            "lines": [pickle_text],
        },
    }


def _write_text(tmp: Path, marker: Path) -> dict:
    return {"_target_": "vtlab.core.atomic.atomic_write_text", "path": str(marker), "lines": ["written\n"]}


def _copyfile(tmp: Path, marker: Path, partial: bool = False) -> dict:
    (tmp / "source.txt").write_text("copied\n")
    return {
        "_target_": "vtlab.runs.directory.shutil.copyfile",
        "src": str(tmp / "source.txt"),
        "dst": str(marker),
        **({"_partial_": True} if partial else {}),
    }


def _remote_code(tmp: Path, marker: Path) -> dict:
    """A Backbone opting into a model directory's own Python, its tokenizer loaded: the directory's module runs."""
    backbone = {
        "_target_": "vtlab.backbones.Backbone",
        "name_or_path": str(_model_dir_with_code(tmp, marker)),
        "trust_remote_code": True,
        "allow_remote_code": True,
    }
    return {"_target_": "vtlab.backbones.Backbone.load_tokenizer", "_args_": [backbone]}


_NOT_ALLOWED = (
    "a config read from a run directory may only name an encoder, an evaluation or a collection loader "
    "(vtlab.export.safe_config.ALLOWED_TARGETS)"
)
ATTACKS = {
    "torch.load": _Attack(
        "model.encoder",
        "preprocess",
        _torch_load_of_a_written_pickle,
        "_target_='vtlab.callbacks.checkpoints.torch.load' is not instantiated: it is "
        f"torch.serialization.load, and {_NOT_ALLOWED}",
    ),
    "atomic_write_text": _Attack(
        "eval",
        "collection",
        _write_text,
        f"_target_='vtlab.core.atomic.atomic_write_text' is not instantiated: {_NOT_ALLOWED}",
    ),
    "copyfile": _Attack(
        "eval",
        "collection",
        _copyfile,
        "_target_='vtlab.runs.directory.shutil.copyfile' is not "
        f"instantiated: it is shutil.copyfile, and {_NOT_ALLOWED}",
    ),
    # a partial inside an allowed loader: subsampled calls `load()` only when the collection is read, after the export
    # has started; reached through an interpolation, so only the resolved form shows it
    "partial copyfile, interpolated": _Attack(
        "eval",
        "collection.load",
        functools.partial(_copyfile, partial=True),
        "_target_='vtlab.runs.directory.shutil.copyfile' is not instantiated: it is shutil.copyfile, and "
        f"{_NOT_ALLOWED}",
        via="shared_loader",
    ),
    "remote code": _Attack(
        "model.encoder",
        "preprocess",
        _remote_code,
        "_args_[0].allow_remote_code=True is refused (expected false): a config read from a run "
        "directory never makes vtlab import a model's own Python code",
    ),
}


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> Path:
    """SPLADE-tiny saved as a training run leaves it (what export would load if it got that far)."""
    from vtlab.backbones import Backbone

    d = tmp_path_factory.mktemp("saved") / "model"
    backbone = Backbone("asset:splade-tiny")
    backbone.load_model().save_pretrained(d)
    backbone.load_tokenizer().save_pretrained(d)
    return d


def _crafted_run(tmp: Path, model: Path, attack: _Attack, marker: Path) -> Path:
    """A run directory (real model/) whose recorded config is a real one (SPLADE-tiny, a BEIR eval) with the
    attack's payload at <node>.<key>."""
    from helpers import compose_config
    from omegaconf import OmegaConf

    run_dir = tmp / "colleague-run"
    shutil.copytree(model, run_dir / "model")
    beir = tmp / "beir"  # the run's eval collection, real: without the check, export would get to the payload
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text('{"_id": "d0", "title": "", "text": "a volcano erupts"}\n')
    (beir / "queries.jsonl").write_text('{"_id": "q0", "text": "volcano"}\n')
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\n")
    cfg = OmegaConf.to_container(
        compose_config(["backbone=splade-tiny", "vocab=native", "eval=beir", f"eval.path={beir}"])
    )
    payload = attack.payload(tmp, marker)
    if attack.via is not None:
        cfg[attack.via] = payload
        payload = "${" + attack.via + "}"
    if attack.key == "collection.load":  # inside an allowed node: vtlab.data.collections.subsampled
        cfg["eval"]["collection"] = {
            "_target_": "vtlab.data.collections.subsampled",
            "_partial_": True,
            "max_docs": 5,
            "load": payload,
        }
    else:
        container = OmegaConf.create(cfg)
        OmegaConf.update(container, f"{attack.node}.{attack.key}", payload, merge=False, force_add=True)
        cfg = OmegaConf.to_container(container)
    (run_dir / ".hydra").mkdir()
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    return run_dir


def _files(root: Path, skip: Path) -> dict[Path, tuple[int, int]]:
    return {
        p: (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file() and skip not in p.parents
    }


def _refusal(run_dir: Path, attack: _Attack) -> str:
    resolved = ", resolved" if attack.via else ""
    return f"{run_dir}/.hydra/config.yaml ({attack.node}{resolved}): {attack.key}.{attack.refused}"


@pytest.mark.cli
@pytest.mark.parametrize("name", ATTACKS)
def test_each_crafted_payload_runs_when_hydra_instantiates_it(tmp_path: Path, name: str) -> None:
    """The control: each payload is real (instantiated as Hydra would, and called as a loader is when it is a
    partial, it creates the marker), so the marker's absence in the tests below means the export refused it. In its
    own process: the remote code is imported once per process and the pickle runs a shell."""
    marker = tmp_path / "ran"
    payload = ATTACKS[name].payload(tmp_path, marker)
    code = (
        "import contextlib, functools, json, sys\nfrom hydra.utils import instantiate\n"
        "with contextlib.suppress(Exception):\n"
        "    obj = instantiate(json.loads(sys.argv[1]))\n"
        "    obj() if isinstance(obj, functools.partial) else None\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, json.dumps(payload)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(HF_MODULES_CACHE=str(tmp_path / "modules")),
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert marker.exists(), res.stderr[-3000:]


@pytest.mark.train
@pytest.mark.usefixtures("shared_cache")
@pytest.mark.parametrize("name", ATTACKS)
def test_export_refuses_each_crafted_run_config_and_nothing_of_it_runs(
    tmp_path: Path, saved_model: Path, name: str
) -> None:
    """`stage=export run_dir=R` in this process (the pipeline, as the entry point calls it): VtlabError in one line
    naming R's config file and the key, the marker absent and no file written anywhere under the test's directory
    (the export's own run directory aside)."""
    from helpers import compose_config

    from vtlab.core.errors import VtlabError
    from vtlab.stages.pipeline import run

    attack, marker = ATTACKS[name], tmp_path / "ran"
    run_dir = _crafted_run(tmp_path, saved_model, attack, marker)
    export_dir = tmp_path / "export"
    before = _files(tmp_path, export_dir)
    cfg = compose_config(
        [
            "stage=export",
            f"run_dir={run_dir}",
            "export.vectors.formats=[anserini]",
            "export.vectors.queries=true",
            f"paths.run_dir={export_dir}",
        ]
    )
    with pytest.raises(VtlabError) as ei:
        run(cfg)
    msg = str(ei.value)
    assert msg == _refusal(run_dir, attack) and "\n" not in msg and user_error(ei.value) is ei.value
    assert not marker.exists()
    assert _files(tmp_path, export_dir) == before


@pytest.mark.cli
@pytest.mark.usefixtures("shared_cache")
@pytest.mark.parametrize("name", ["torch.load", "remote code"])
def test_export_command_refuses_a_crafted_run_config_with_one_line(
    tmp_path: Path, saved_model: Path, name: str
) -> None:
    """The same as a user runs it: `python -m vtlab stage=export run_dir=R` exits 2 with one `vtlab: error:` line."""
    from helpers import one_error_line

    attack, marker = ATTACKS[name], tmp_path / "ran"
    run_dir = _crafted_run(tmp_path, saved_model, attack, marker)
    before = _files(tmp_path, run_dir / "exports")
    res = run_vtlab(
        "stage=export",
        f"run_dir={run_dir}",
        "logger=none",
        timeout=600,
        env=child_env(HF_MODULES_CACHE=str(tmp_path / "modules")),
    )
    assert res.returncode == 2, res.stderr[-3000:]
    assert one_error_line(res.stderr) == f"vtlab: error: {_refusal(run_dir, attack)}"
    assert not marker.exists()
    # the export command's own record (R/exports/<time>: Hydra's .hydra/, its log, status.json) and nothing else
    exports = run_dir / "exports"
    assert _files(tmp_path, exports) == before
    own = {p.relative_to(exports).parts[1:] for p in _files(exports, tmp_path / "none")}
    assert all(parts[0] in (".hydra", "status.json") or parts[-1].endswith(".log") for parts in own), own


@pytest.mark.parametrize("key", ["", "preprocess."])
def test_export_refuses_foreign_targets_in_a_run_config(tmp_path: Path, key: str) -> None:
    from omegaconf import OmegaConf

    from vtlab.core.errors import VtlabError
    from vtlab.export.run_encoder import encoder_from_run

    marker, run_dir = tmp_path / "ran", tmp_path / "colleague-run"
    (run_dir / "model").mkdir(parents=True)
    (run_dir / "model" / "config.json").write_text("{}")
    (run_dir / ".hydra").mkdir()
    evil = {"_target_": "builtins.open", "_args_": [str(marker), "w"]}  # creates the file (Hydra blocks os.system)
    encoder = {"_target_": "vtlab.models.encoder.SpladeEncoder.from_backbone", "preprocess": evil} if key else evil
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml({"model": {"encoder": encoder}}))
    with pytest.raises(VtlabError) as ei:
        encoder_from_run(run_dir, OmegaConf.create({}))
    assert str(ei.value) == (
        f"{run_dir}/.hydra/config.yaml (model.encoder): {key}_target_='builtins.open' is not "
        f"instantiated: {_NOT_ALLOWED}"
    )
    assert not marker.exists()
    # the control: Hydra would have run it
    from hydra.utils import instantiate

    instantiate(OmegaConf.create(evil))
    assert marker.exists()


def test_a_vtlab_alias_passes_only_when_it_is_an_allowed_object() -> None:
    """Names are resolved as Hydra resolves them (attribute walk), and compared by identity, not by prefix."""
    from vtlab.export.safe_config import target_problem

    assert target_problem("vtlab.models.inference_free.SpladeEncoder.from_backbone") is None  # SpladeEncoder's own
    assert target_problem("vtlab.data.collections.atomic_write_text") == (
        f"is not instantiated: it is vtlab.core.atomic.atomic_write_text, and {_NOT_ALLOWED}"
    )
    assert "it is shutil.copyfile" in target_problem("vtlab.runs.directory.shutil.copyfile")
    assert "it is vtlab.backbones.pretrained.Backbone" in target_problem("vtlab.backbones.Backbone")
    for name in ("vtlab.nothing.here", "vtlab..models", "vtlab.models.encoder.${x}", "builtins.exec", "os.system"):
        assert target_problem(name) is not None, name
    assert target_problem(None) is not None and target_problem({"a": 1}) is not None


def test_resolving_a_vtlab_name_imports_only_vtlab_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check's walk imports vtlab modules only (beyond them, attributes of what is already imported): whatever a
    crafted name spells, it never makes the check import a module of its choosing."""
    from vtlab.export import safe_config

    imported: list[str] = []
    real = safe_config.import_module
    monkeypatch.setattr(safe_config, "import_module", lambda name: imported.append(name) or real(name))
    safe_config.allowed_objects.cache_clear()  # resolve the allow-list again, under the watch
    names = [
        "vtlab.callbacks.checkpoints.torch.utils.bottleneck",
        "vtlab.callbacks.checkpoints.torch.load",
        "vtlab.data.hf.datasets.x",
        "vtlab.runs.directory.shutil.copyfile",
        "vtlab.stages.nope",
        "vtlab.models.inference_free.SpladeEncoder",
    ]
    assert all(safe_config.target_problem(n) is not None for n in names)
    assert safe_config.target_problem("vtlab.models.inference_free.SpladeEncoder.from_backbone") is None
    assert imported and all(n == "vtlab" or n.startswith("vtlab.") for n in imported), imported
    assert "torch.utils.bottleneck" not in sys.modules


def _conf_targets(node: object) -> set[str]:
    if isinstance(node, dict):
        return ({str(node["_target_"])} if "_target_" in node else set()) | {
            t for v in node.values() for t in _conf_targets(v)
        }
    if isinstance(node, list):
        return {t for v in node for t in _conf_targets(v)}
    return set()


def test_the_allow_list_is_exactly_what_conf_gives_the_nodes_export_reads() -> None:
    """ALLOWED_TARGETS = the targets of conf/model/*.yaml `encoder` nodes, of the conf/vocab/*.yaml `preprocess` nodes
    they interpolate, and of conf/eval/*.yaml; each a canonical name (module.qualname of what it resolves to)."""
    import yaml

    from vtlab.export.safe_config import ALLOWED_TARGETS, locate, qualified_name

    def nodes(group: str, key: str | None) -> list[object]:
        docs = [yaml.safe_load(p.read_text()) or {} for p in sorted((ROOT / "conf" / group).glob("*.yaml"))]
        return [d.get(key) for d in docs] if key else docs

    used = _conf_targets(nodes("model", "encoder") + nodes("vocab", "preprocess") + nodes("eval", None))
    assert used == set(ALLOWED_TARGETS)
    for name in ALLOWED_TARGETS:
        assert qualified_name(locate(name)) == name


@pytest.mark.train
@pytest.mark.parametrize("model", ["splade", "inference-free", "bm25"])
def test_every_conf_model_and_eval_passes_as_a_recorded_run(tmp_path: Path, model: str) -> None:
    """What vtlab itself records passes: a run of each conf/model with each conf/eval (and each conf/vocab's
    preprocess) has its model.encoder and eval read back from .hydra/config.yaml, raw and resolved."""
    from helpers import compose_config
    from omegaconf import OmegaConf

    from vtlab.export.run_config import RunConfig

    evals = [p.stem for p in sorted((ROOT / "conf" / "eval").glob("*.yaml"))]
    vocabs = [p.stem for p in sorted((ROOT / "conf" / "vocab").glob("*.yaml"))] if model == "splade" else ["native"]
    runs = [[f"eval={e}", "vocab=native"] for e in evals] + [["vocab=" + v] for v in vocabs]
    command = compose_config(["stage=export"])
    for i, overrides in enumerate(runs):
        run_dir = tmp_path / str(i)
        (run_dir / ".hydra").mkdir(parents=True)
        recorded = compose_config([f"model={model}", "backbone=gte-multilingual", *overrides])  # its trust_remote_code
        (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(recorded))  # is the backbone's: not read
        run = RunConfig(command, run_dir)
        encoder, _ = run.node("model.encoder")
        assert encoder is not None and "backbone" not in encoder, overrides
        run.node("eval")


def test_only_the_export_reads_a_config_from_disk_and_instantiates_it() -> None:
    """Other readers of recorded configs (reuse, resume, report, the model card) compare or print values: a module
    that loads a config file and instantiates must be vtlab/export/run_config.py, which checks every node first."""
    readers = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "vtlab").rglob("*.py")
        if re.search(r"OmegaConf\.load\(|yaml\.(safe_)?load\(|load_record\(", p.read_text())
    }
    instantiating = {p for p in readers if re.search(r"\binstantiate\(", (ROOT / p).read_text())}
    # vtlab/index/__init__.py loads only its own vtlab/index/indexes.yaml (a path fixed in the package; a config names
    # one of its nodes, checked against them), never a file of a run directory
    assert instantiating == {"vtlab/export/run_config.py", "vtlab/index/__init__.py"}, instantiating


def test_targets_renamed_since_a_run_was_recorded_map_to_allowed_names_and_keep_the_baseline_key() -> None:
    """A run recorded before vtlab/evaluation/ became a package names vtlab.eval_suite.EvaluationSuite and
    vtlab.evaluation.RetrievalEvaluation: rename_targets maps each to an allowed current name (nothing else changes),
    and the baseline cache key still hashes the old names, so cached baselines stay valid."""
    from omegaconf import OmegaConf

    from vtlab.evaluation.baseline import _keyed_targets
    from vtlab.export.safe_config import ALLOWED_TARGETS, RENAMED_TARGETS, check_targets, rename_targets

    for old, new in RENAMED_TARGETS.items():
        assert new in ALLOWED_TARGETS and old not in ALLOWED_TARGETS
    recorded = {
        "_target_": "vtlab.eval_suite.EvaluationSuite",
        "evaluations": {
            "a": {
                "_target_": "vtlab.evaluation.RetrievalEvaluation",
                "collection": {"_target_": "vtlab.data.collections.load_beir", "_partial_": True},
            }
        },
        "x": ["${y}"],
    }
    for node in (OmegaConf.create(recorded), copy.deepcopy(recorded)):
        assert rename_targets(node) == 2 and rename_targets(node) == 0
        check_targets(node, "run")
        plain = OmegaConf.to_container(node) if OmegaConf.is_config(node) else node
        assert plain["_target_"] == "vtlab.evaluation.suite.EvaluationSuite"
        assert plain["evaluations"]["a"]["collection"]["_target_"] == "vtlab.data.collections.load_beir"
        assert plain["x"] == ["${y}"]
        assert _keyed_targets(plain) == {**recorded, "_target_": "vtlab.eval_suite.EvaluationSuite"}
