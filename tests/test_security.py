"""Nothing on disk runs code: crafted checkpoints, planted native kernels, remote code and foreign configs are refused
(or rebuilt) with one line, and the tests check with real crafted files that nothing of them ran."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from torch import nn

from vtlab.errors import RunDirError
from vtlab.errors import user_error
from vtlab.runs.directory import LAST_CKPT

ROOT = Path(__file__).resolve().parents[1]
_ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "offline",
        "TOKENIZERS_PARALLELISM": "false"}


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
    from vtlab.checkpoints import check_checkpoint_fits, load_checkpoint

    ckpt = _crafted_checkpoint(tmp_path / "last.ckpt", tmp_path / "ran")
    for load in (lambda: load_checkpoint(ckpt), lambda: check_checkpoint_fits(ckpt, nn.Linear(2, 1))):
        with pytest.raises(RunDirError) as ei:
            load()
        msg = str(ei.value)
        assert "\n" not in msg and user_error(ei.value) is ei.value
        assert msg.startswith(f"{ckpt}: refused to load the checkpoint: it asks to import posix.system"), msg
    assert not (tmp_path / "ran").exists()


def test_a_real_vtlab_checkpoint_needs_no_global_beyond_the_allow_list(tmp_path: Path) -> None:
    """What vtlab writes (Lightning state, the RNG streams of ResumeState, the last/best checkpoint callbacks, an
    optimizer and a scheduler) loads weights-only: nothing outside CHECKPOINT_GLOBALS; and Lightning resumes from it."""
    from vtlab.callbacks.last_checkpoint import LastCheckpoint
    from vtlab.callbacks.resume_state import ResumeState
    from vtlab.checkpoints import CHECKPOINT_GLOBALS, SameDirCheckpointIO, load_checkpoint

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
        return pl.Trainer(max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
                          callbacks=[LastCheckpoint(str(tmp_path), every_n_train_steps=1), ResumeState()],
                          plugins=[SameDirCheckpointIO()], default_root_dir=str(tmp_path))

    trainer(3).fit(Toy(), data)
    last = tmp_path / "last.ckpt"
    assert set(torch.serialization.get_unsafe_globals_in_checkpoint(str(last))) <= {
        f"{g.__module__}.{g.__qualname__}" for g in CHECKPOINT_GLOBALS}
    assert load_checkpoint(last)["global_step"] == 3
    resumed = trainer(5)
    resumed.fit(Toy(), data, ckpt_path=str(last), weights_only=True)
    assert resumed.global_step == 5


@pytest.mark.slow
def test_rerun_with_a_crafted_last_ckpt_refuses_with_one_line(tmp_path: Path) -> None:
    """The attack from the issue: a colleague's (or anyone's) run dir holds a crafted last.ckpt; rerunning the same
    command (resume=auto) must not run it."""
    run_dir, marker = tmp_path / "run", tmp_path / "ran"
    _crafted_checkpoint(run_dir / LAST_CKPT, marker)
    res = subprocess.run([sys.executable, "-m", "vtlab", "backbone=splade-tiny", "vocab=native", "apc=off",
                          "baseline=false", "logger=none", "stage=finetune", "data.batch_size=2",
                          "data.doc_max_length=32", "data.dev.dev_size=10", "data.dev.max_docs=50",
                          f"hydra.run.dir={run_dir}"], cwd=ROOT, env=_ENV, capture_output=True, text=True, timeout=600)
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith(f"vtlab: error: {run_dir / LAST_CKPT}: refused to load the checkpoint: it asks to import "
                           "posix.system"), res.stderr[-3000:]
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
    return subprocess.run([sys.executable, "-c", _LOAD], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**_ENV, "VTLAB_CACHE": str(cache), **env})


def _built(cache: Path) -> Path:
    res = _load_in_subprocess(cache)
    assert res.returncode == 0 and "BACKEND native EQUAL True" in res.stdout, res.stdout + res.stderr
    return Path(res.stdout.split("LIB ", 1)[1].split()[0])


def _planted_library(tmp: Path, marker: Path) -> Path:
    """A shared library whose constructor creates `marker` as soon as anything loads it."""
    src = tmp / "evil.c"
    src.write_text(textwrap.dedent(f"""
        #include <stdio.h>
        __attribute__((constructor)) static void planted(void) {{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}
        long vt_taat_topk(void) {{ return 0; }}
    """))
    out = tmp / "evil.so"
    subprocess.run([shutil.which("cc") or "gcc", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out


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
    assert warnings == [f"WARNING exact-search kernel {lib} is not loaded (its sha256 differs from the one recorded "
                        f"at build time in {lib.name}.sha256): rebuilding it"], res.stderr
    assert lib.read_bytes() != evil.read_bytes()


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
        f"WARNING {lib.parent} was open to other users (mode 777): its contents are discarded and it is made 0700"]


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
    (d / "config.json").write_text('{"model_type": "evil", "vocab_size": 10, "auto_map": {"AutoConfig": '
                                   '"configuration_evil.EvilConfig", "AutoModelForMaskedLM": "modeling_evil.EvilLM"}}')
    code = (f"import pathlib\npathlib.Path({str(marker)!r}).touch()\nfrom transformers import PretrainedConfig\n"
            "class EvilConfig(PretrainedConfig):\n    model_type = 'evil'\n")
    (d / "configuration_evil.py").write_text(code)
    (d / "modeling_evil.py").write_text(code)
    return d


def test_a_model_directory_with_code_is_refused_without_the_opt_in(tmp_path: Path) -> None:
    from vtlab.backbones import Backbone
    from vtlab.errors import AssetError

    marker = tmp_path / "ran"
    d = _model_dir_with_code(tmp_path, marker)
    with pytest.raises(AssetError) as plain:  # a backbone config that does not ask for remote code
        Backbone(str(d)).load_model()
    assert str(plain.value) == (
        f"backbone.name_or_path={str(d)!r} contains its own Python code (configuration_evil.EvilConfig, "
        "modeling_evil.EvilLM), which vtlab does not import: use a model that needs none, or set trust_remote_code: "
        "true in its backbone config and pass backbone.allow_remote_code=true after reading that code")
    with pytest.raises(AssetError) as asked:  # one that does (gte-multilingual), without this run's opt-in
        Backbone(str(d), trust_remote_code=True).load_tokenizer()
    assert str(asked.value).startswith(f"backbone.name_or_path={str(d)!r} needs its own Python code (the backbone "
                                       "config sets trust_remote_code: true), which vtlab does not import unless "
                                       "this run opts in: pass backbone.allow_remote_code=true")
    assert not marker.exists()


def test_the_opt_in_prints_what_it_imports_and_then_imports_it(tmp_path: Path) -> None:
    """The control for the test above (the crafted code is real and runs once allowed), in its own process with its
    own transformers module cache."""
    marker = tmp_path / "ran"
    d = _model_dir_with_code(tmp_path, marker)
    res = subprocess.run([sys.executable, "-c", "from vtlab.backbones import Backbone\n"
                          f"Backbone({str(d)!r}, trust_remote_code=True, allow_remote_code=True)._load("
                          f"__import__('transformers').AutoConfig.from_pretrained, {str(d)!r}, 'backbone.name_or_path')"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**_ENV, "HF_MODULES_CACHE": str(tmp_path / "modules")})
    assert res.returncode == 0, res.stderr
    assert (f"vtlab: backbone.allow_remote_code=true: importing the Python code of backbone.name_or_path={d}: "
            "configuration_evil.EvilConfig, modeling_evil.EvilLM") in res.stderr.splitlines()
    assert marker.exists()


def test_gte_multilingual_needs_the_per_run_opt_in() -> None:
    from hydra.utils import instantiate

    from helpers import compose_cfg

    default = instantiate(compose_cfg(["backbone=gte-multilingual"]).backbone)
    opted = instantiate(compose_cfg(["backbone=gte-multilingual", "backbone.allow_remote_code=true"]).backbone)
    assert (default.trust_remote_code, default.allow_remote_code) == (True, False)
    assert (opted.trust_remote_code, opted.allow_remote_code) == (True, True)


# ---- configs read from another run's directory (stage=export run_dir=X) ----------------------------------------


@pytest.mark.parametrize("key", ["", "preprocess."])
def test_export_refuses_foreign_targets_in_a_run_config(tmp_path: Path, key: str) -> None:
    from omegaconf import OmegaConf

    from vtlab.errors import VtlabError
    from vtlab.stages.export import encoder_from_run

    marker, run_dir = tmp_path / "ran", tmp_path / "colleague-run"
    (run_dir / "model").mkdir(parents=True)
    (run_dir / "model" / "config.json").write_text("{}")
    (run_dir / ".hydra").mkdir()
    evil = {"_target_": "builtins.open", "_args_": [str(marker), "w"]}  # creates the file (Hydra blocks os.system)
    encoder = {"_target_": "vtlab.models.encoder.SpladeEncoder.from_backbone", "preprocess": evil} if key else evil
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml({"model": {"encoder": encoder}}))
    with pytest.raises(VtlabError) as ei:
        encoder_from_run(run_dir, OmegaConf.create({}))
    assert str(ei.value).startswith(f"{run_dir}/.hydra/config.yaml (model.encoder): {key}_target_='builtins.open' is not "
                                    "instantiated: a config read from a run directory may only name vtlab.* or ")
    assert "\n" not in str(ei.value) and not marker.exists()
    # the control: Hydra would have run it
    from hydra.utils import instantiate

    instantiate(OmegaConf.create(evil))
    assert marker.exists()


def test_export_allows_every_target_vtlab_conf_uses() -> None:
    """The allow-list is exactly what conf/ names outside vtlab: each of those is accepted, and nothing more."""
    import re

    from vtlab.stages.export import LIBRARY_TARGETS, check_targets

    used = {m for p in (ROOT / "conf").rglob("*.yaml")
            for m in re.findall(r"_target_:\s*([\w.]+)", p.read_text()) if not m.startswith("vtlab.")}
    assert used == set(LIBRARY_TARGETS)
    for target in used:
        check_targets({"a": {"_target_": target}}, "x")
