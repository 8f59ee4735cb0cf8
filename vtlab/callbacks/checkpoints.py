"""Lightning checkpoints as vtlab writes and reads them: weights-only loading (a crafted file runs nothing), a shape
check before a resume, the global RNG streams as plain values, writes renamed into place beside the target, the
disk space a training run's checkpoints need, and the checkpoint a finished training chose."""

from __future__ import annotations

import os
import pickle
import random
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from vtlab.core.atomic import atomic_write_bytes
from vtlab.core.errors import DiskError, RunDirError, gib

if TYPE_CHECKING:
    import pytorch_lightning as pl


# AdamW (conf/model, vtlab's one optimizer) keeps two states per parameter: exp_avg and exp_avg_sq.
OPTIMIZER_STATES = 2
# Checkpoint files on disk at once: last.ckpt, the best-by-dev one, and the replacement of either written beside it.
CHECKPOINT_COPIES = 3
MARGIN_BYTES = 100 * 2**20  # logs, configs, tokenizer, evaluation outputs


def required_space(run_dir: Path, module: torch.nn.Module) -> tuple[int, str]:
    """(bytes a training run still needs under `run_dir`, how that was counted). A checkpoint holds every parameter
    with its optimizer states; model/ the weights once more. Checkpoints already there (a resume) are replaced, so
    their space counts as available. The model as built: a vocabulary transfer (at setup) changes the embedding rows,
    which the 10% margin covers for the usual vocabulary sizes."""
    n_params = sum(p.numel() for p in module.parameters())
    weights = sum(p.numel() * p.element_size() for p in module.parameters())
    ckpt = weights * (1 + OPTIMIZER_STATES)
    existing = sum(f.stat().st_size for f in (run_dir / "checkpoints").glob("*.ckpt") if f.is_file())
    need = max(0, CHECKPOINT_COPIES * ckpt - existing) + weights + ckpt // 10 + MARGIN_BYTES
    how = (
        f"{CHECKPOINT_COPIES} checkpoints of {gib(ckpt)} = {n_params:,} parameters x "
        f"{weights // max(n_params, 1)} bytes x (1 + {OPTIMIZER_STATES} optimizer states)"
        + (f", less {gib(existing)} of checkpoints already there" if existing else "")
        + f", model/ {gib(weights)}, margin {gib(ckpt // 10 + MARGIN_BYTES)}"
    )
    return need, how


def check_free_space(run_dir: Path, module: torch.nn.Module) -> None:
    """DiskError (one line: the path, the free and the needed sizes) when the disk of `run_dir` cannot hold the run's
    checkpoints and model, before any training step."""
    need, how = required_space(run_dir, module)
    where = next(p for p in (run_dir, *run_dir.absolute().parents) if p.exists())  # run_dir may not exist yet
    free = shutil.disk_usage(where).free
    if free < need:
        raise DiskError(
            f"{run_dir}: not enough free disk space to train: {gib(free)} free, {gib(need)} needed "
            f"({how}); free some space there or choose another hydra.run.dir"
        )


def rng_states() -> dict[str, Any]:
    """The global RNG streams, as tensors and plain values (checkpoints load with torch's weights_only)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])
    kind, keys, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


# What vtlab's Lightning checkpoints hold beyond torch's weights-only defaults (tensors, dicts, lists, tuples, str,
# numbers, OrderedDict): nothing: rng_states stores tensors and plain values, Lightning's loops, callbacks, optimizer
# and scheduler states are plain too (tests/core/test_security.py checks a real checkpoint). A type added to a
# checkpoint goes here, by name; nothing else is ever unpickled, so a crafted checkpoint cannot run code.
CHECKPOINT_GLOBALS: list[Any] = []
_UNSUPPORTED_GLOBAL = re.compile(r"GLOBAL (\S+)|Unsupported global: (\S+)|global (\S+) (?:was|is) not")


def load_checkpoint(path: str | os.PathLike[str], mmap: bool = False) -> dict[str, Any]:
    """A checkpoint, loaded weights-only: unpickling may build only tensors, plain containers and CHECKPOINT_GLOBALS.
    RunDirError (one line) for a file that needs anything else (a crafted checkpoint: nothing of it ran) or that cannot
    be read (truncated, foreign)."""
    try:
        with torch.serialization.safe_globals(CHECKPOINT_GLOBALS):
            ckpt = torch.load(path, map_location="cpu", mmap=mmap, weights_only=True)
    except pickle.UnpicklingError as e:
        m = _UNSUPPORTED_GLOBAL.search(str(e))
        if m is None:
            raise RunDirError(_unreadable(path, e)) from None
        name = next(g for g in m.groups() if g).rstrip(".,")
        raise RunDirError(
            f"{path}: refused to load the checkpoint: it asks to import {name}, which a vtlab checkpoint "
            "never holds (a crafted file can run code this way; nothing of it ran); delete it, or pass "
            "overwrite=true to start over"
        ) from None
    except Exception as e:  # noqa: BLE001 - truncated or foreign file: any load error means "cannot resume from it"
        raise RunDirError(_unreadable(path, e)) from None
    if not isinstance(ckpt, dict):
        raise RunDirError(
            f"{path}: not a Lightning checkpoint (a {type(ckpt).__name__}, expected a dict); delete it, "
            "or pass overwrite=true to start over"
        )
    return ckpt


def chosen_checkpoint(trainer: pl.Trainer) -> str | None:
    """The checkpoint the trainer's checkpoint callback chose: the best by the dev metric, else the last one; None
    when there is no callback or it wrote nothing."""
    cb = trainer.checkpoint_callback
    if cb is None:
        return None
    return cb.best_model_path or cb.last_model_path or None


def _unreadable(path: str | os.PathLike[str], e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    return (
        f"{path}: cannot read the checkpoint ({type(e).__name__}: {first}); delete it to resume from an earlier "
        "one, or pass overwrite=true to start over"
    )


def check_checkpoint_fits(path: str | os.PathLike[str], module: torch.nn.Module) -> None:
    """RunDirError naming the first tensor whose shape differs between the checkpoint and this run's model (a run
    resumed with another vocabulary or backbone), instead of Lightning's multi-page RuntimeError."""
    ckpt = load_checkpoint(path, mmap=True)
    saved = ckpt.get("state_dict", {})
    current = module.state_dict()
    for key, tensor in current.items():
        if key in saved and saved[key].shape != tensor.shape:
            raise RunDirError(
                f"{path}: cannot resume: {key} has shape {list(saved[key].shape)} in the checkpoint but "
                f"{list(tensor.shape)} in this run's model (a different vocab/backbone?); resume with the "
                "interrupted run's settings, or pass overwrite=true to start over"
            )
    missing, unexpected = sorted(set(current) - set(saved)), sorted(set(saved) - set(current))
    if missing or unexpected:
        what = f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}"
        raise RunDirError(
            f"{path}: cannot resume: the checkpoint's weights do not match this run's model ({what}, "
            f"{len(missing)} missing, {len(unexpected)} unexpected); resume with the interrupted run's "
            "settings, or pass overwrite=true to start over"
        )


class SameDirCheckpointIO(TorchCheckpointIO):
    """Checkpoints written to a temp file next to the target and renamed into place: a kill leaves the previous
    last.ckpt intact. (Lightning's own transaction stages the file in the system temp dir, and moving it onto another
    filesystem is a copy, which a kill can cut short.)"""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        atomic_write_bytes(path, lambda f: torch.save(checkpoint, f))  # full or read-only disk: one line, no temp

    def load_checkpoint(self, path: Any, map_location: Any | None = None, weights_only: bool | None = None) -> Any:
        """Lightning's resume load: always weights-only (whatever `weights_only` the caller passes)."""
        if "://" in str(path):
            return super().load_checkpoint(path, map_location=map_location, weights_only=True)
        return load_checkpoint(path)
