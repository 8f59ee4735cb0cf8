"""What goes into the SparseEncoder directory besides sentence-transformers' modules: ONNX graphs (export.onnx, and
their int8 form: export.onnx_int8) and the model card README.md (export.model_card), with the run's command, the
export's command and the run's metrics."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from vtlab.export.model_card import card_info, model_card, run_metrics, run_overrides
from vtlab.export.onnx import export_onnx
from vtlab.export.onnx_int8 import quantize_graphs
from vtlab.export.run_config import RunConfig
from vtlab.export.sentence_transformers import encoder_settings
from vtlab.export.vectors import format_names


def this_run_overrides(cfg: DictConfig) -> list[str] | None:
    """The overrides of the running command (Hydra's own record; its .hydra/overrides.yaml when not under Hydra)."""
    if HydraConfig.initialized():
        return [str(o) for o in HydraConfig.get().overrides.task]
    return run_overrides(Path(cfg.paths.run_dir))


def model_extras(
    cfg: DictConfig,
    encoder: Any,
    run: RunConfig,
    base: Path,
    out: Path,
    trained: bool,
    vector_files: dict[str, Path],
    vectors_of: str | None,
) -> list[Callable[[Path], Any]]:
    """The writers of the SparseEncoder directory's extras (each called with that directory, in order): ONNX graphs
    (export.onnx; export.onnx_int8 writes them too, then their int8 form) and the model card README.md
    (export.model_card)."""
    ex = cfg.export
    extras: list[Callable[[Path], Any]] = []
    if ex.get("onnx") or ex.get("onnx_int8"):
        extras.append(lambda model_dir: export_onnx(encoder, model_dir / "onnx"))
    if ex.get("onnx_int8"):
        target = ex.onnx_int8
        extras.append(lambda model_dir: quantize_graphs(model_dir / "onnx", model_dir / "onnx-int8", target))
    if ex.get("model_card", True):
        run_dir = Path(str(cfg.run_dir)) if cfg.get("run_dir") else None
        info = card_info(
            run,
            name=ex.get("name"),
            run_dir=run_dir or base,
            trained=trained,
            license=ex.get("license"),
            repo_id=ex.get("push_to_hub"),
        )
        card = model_card(
            info,
            encoder_settings(encoder),
            train_overrides=run_overrides(run_dir),
            export_overrides=this_run_overrides(cfg),
            metrics=run_metrics(base),
            vector_files=vector_files,
            vectors_of=vectors_of,
            onnx_dir="onnx" if ex.get("onnx") or ex.get("onnx_int8") else None,
            card_dir=out,
            run_dir=base,
            formats=format_names(ex.vectors),
        )
        extras.append(lambda model_dir: (model_dir / "README.md").write_text(card))
    return extras
