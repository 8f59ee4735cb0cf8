"""Paths the user controls stay inside their roots, and no output replaces an input; checked from the config, before
any directory is made (RunDirGuard, before Hydra creates the run directory) and again before any stage runs
(vtlab.runs.checks).

- Names (`name`, the parts of the default name, `eval.name`, ...) become one directory or file name: under outputs/
  (the run directory), under the run directory (eval/<name>/) or in the cache. A `/` or a `..` there would put the
  run, or a cache entry, somewhere else (`name=../../../escape`: outside outputs/).
- The outputs of stage=export (`export.out`, replaced as a whole; `export.vectors.dir`, files written into it) are
  never the run being exported, another run directory (one holding `.hydra/` or status.json), the cache, or the
  corpus read, nor inside or around them; the run's own `<run>/sparse-encoder` and `<run>/vectors` (the defaults)
  and this command's own run directory are where exports go.
- export.overwrite=true replaces only an earlier export (a directory holding EXPORT_MANIFEST) or an empty directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from vtlab.core.atomic import link_out_of, real_path, within
from vtlab.core.errors import ConfigError, VtlabError
from vtlab.core.json_files import read_json
from vtlab.core.paths import cache_root, is_component

EXPORT_MANIFEST = "vtlab_export.json"  # what vtlab.export.sentence_transformers writes into every export
# Keys whose value becomes one path component: the run directory under outputs/ (name, and the parts of the default
# name), eval/<eval.name>/ in the run directory, cache entries (<vocab.name>-<init.name>-..., <start.name>-...).
# The parts of the default name first: the key the user set is the one named.
NAME_KEYS = (
    "stage.name",
    "backbone.name",
    "vocab.name",
    "init.name",
    "start.name",
    "apc.name",
    "eval.name",
    "eval.mteb_task",
    "name",
)
NAME_MAP_KEYS = ("eval.evaluations",)  # mappings whose keys become directory names (eval/<key>/), as their mteb_task
EXPORT_SUBDIRS = {"export.out": "sparse-encoder", "export.vectors.dir": "vectors"}  # the defaults, in the run


def is_run_dir(path: Path) -> bool:
    """A directory a vtlab run wrote: Hydra's record of it or its status.json."""
    return (path / ".hydra").is_dir() or (path / "status.json").is_file()


def _select(cfg: DictConfig, key: str) -> Any:
    try:
        return OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
    except (OmegaConfBaseException, ValueError):  # an interpolation that cannot resolve here (paths.run_dir outside a
        # Hydra run): whoever reads it reports it
        return None


# ---- names ----------------------------------------------------------------------------------------------------------
def check_name(key: str, value: Any) -> None:
    """ConfigError unless `value` is a plain name (one path component): no `/`, not empty, `.` or `..`."""
    if value is None:
        return
    text = str(value)
    if not is_component(text):
        raise ConfigError(
            f"{key}={text!r}: expected a plain name (no '/', not empty, '.' or '..'): it becomes a "
            "directory or file name (the run directory under outputs/, eval/<name>/, cache entries)",
            key=key,
        )


def check_names(cfg: DictConfig) -> None:
    for key in NAME_KEYS:
        check_name(key, _select(cfg, key))
    for key in NAME_MAP_KEYS:
        node = _select(cfg, key)
        if isinstance(node, DictConfig):
            for child in node.keys():
                check_name(f"{key}.{child}", child)
                check_name(f"{key}.{child}.mteb_task", _select(node, f"{child}.mteb_task"))


# ---- export outputs ---------------------------------------------------------------------------------------------
def this_run_dir(cfg: DictConfig) -> Path | None:
    """paths.run_dir, or None where it cannot be resolved yet (Hydra's output dir, outside a Hydra run)."""
    value = _select(cfg, "paths.run_dir")
    return Path(str(value)) if value else None


def export_targets(cfg: DictConfig, this: Path | None) -> dict[str, tuple[Path, Path | None]]:
    """key → (output path, the default it would be in the exported run or this run's directory) for each output of
    stage=export that this config writes: export.out (SparseEncoder directory), export.vectors.dir (vector files)."""
    ex = _select(cfg, "export")
    if not isinstance(ex, DictConfig):
        return {}
    source = _select(cfg, "run_dir")
    base = Path(str(source)) if source else this
    wanted = {
        "export.out": bool(ex.get("sentence_transformers", True)),
        "export.vectors.dir": bool(_select(cfg, "export.vectors.formats")),
    }
    targets: dict[str, tuple[Path, Path | None]] = {}
    for key, sub in EXPORT_SUBDIRS.items():
        given = _select(cfg, key)
        default = base / sub if base is not None else None
        path = Path(str(given)) if given else default
        if wanted[key] and path is not None:
            targets[key] = (path, default)
    return targets


def output_problem(
    path: Path, *, source: Path | None, this: Path | None, default: Path | None, inputs: dict[str, Path], replaces: bool
) -> str | None:
    """Why `path` may not be written (None if it may). `source`: the run being exported; `this`: this command's run
    directory; `default`: the output's default in the run (always allowed there); `inputs`: other paths read (the
    cache, the corpus), by what names them; `replaces`: the output replaces `path` as a whole."""
    for root in (r for r in (source, this) if r is not None):
        if (link := link_out_of(path, root)) is not None:
            return (
                f"goes through the link {link} (to {real_path(link)}), out of the run directory {root}: nothing is "
                "written outside a run through a link"
            )
    p = real_path(path)
    for what, given in inputs.items():
        q = real_path(given)
        if within(q, p) or within(p, q):
            return f"{'is' if p == q else 'holds' if within(q, p) else 'is inside'} {what}"
    own = this is not None and within(p, real_path(this))  # this command's own directory: its outputs go there
    is_default = default is not None and p == real_path(default)
    if source is not None:
        s = real_path(source)
        if within(s, p):
            return f"{'is' if p == s else 'holds'} the run being exported (run_dir={source})"
        if within(p, s) and not (own or is_default):
            return (
                f"is inside the run being exported (run_dir={source}), where only its "
                f"{default.name if default is not None else 'default'}/ is written"
            )
    if replaces and this is not None and within(real_path(this), p) and p != real_path(this):
        return f"holds this run's own directory {this}"
    if not (own or is_default):
        for above in (p, *p.parents):
            if is_run_dir(above):
                return "is a run directory" if above == p else f"is inside the run directory {above}"
    if p.is_dir():  # a run directly in it (the usual layout of a folder of runs); deeper ones are not searched
        for child in sorted(p.iterdir()):
            if child.is_dir() and is_run_dir(child) and not (this is not None and real_path(child) == real_path(this)):
                return f"holds the run directory {child}"
    return None


def is_export(directory: Path) -> bool:
    """Whether `directory` holds an export's EXPORT_MANIFEST as the export writes it: a regular file in the directory
    itself (not a link to one elsewhere) holding a JSON object with the exported "encoder". A file of that name that is
    empty, damaged or linked in does not make a folder an export that export.overwrite=true may replace."""
    manifest = directory / EXPORT_MANIFEST
    if manifest.is_symlink() or not manifest.is_file():
        return False
    try:
        return isinstance(read_json(manifest, dict).get("encoder"), dict)
    except VtlabError:
        return False


def check_export_target(out: Path, overwrite: bool, key: str = "export.out") -> bool:
    """Whether `out` (a directory replaced as a whole) holds something to replace; ConfigError if that is not allowed:
    a file, or a non-empty directory without overwrite, or with overwrite one that is no earlier export."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{key}={out}: exists and is not a directory", key=key)
    if not (out.is_dir() and any(out.iterdir())):
        return False
    earlier = is_export(out)
    if not overwrite:
        fix = (
            "set export.overwrite=true to replace it"
            if earlier
            else f"it is no earlier export (no {EXPORT_MANIFEST}), so export.overwrite=true would not replace it "
            "either: choose a new or empty directory"
        )
        raise ConfigError(f"{key}={out}: exists and is not empty ({fix})", key=key)
    if not earlier:
        shown = ", ".join(sorted(c.name for c in out.iterdir())[:3])
        raise ConfigError(
            f"{key}={out}: export.overwrite=true replaces only an earlier export (a directory holding "
            f"{EXPORT_MANIFEST}) or an empty directory, and this one holds {shown}: choose a new or "
            "empty directory",
            key=key,
        )
    return True


def check_export_paths(cfg: DictConfig, this: Path | None = None) -> None:
    """ConfigError naming the key and value for an output of stage=export that would be or replace an input."""
    this = this if this is not None else this_run_dir(cfg)
    source_value = _select(cfg, "run_dir")
    source = Path(str(source_value)) if source_value else None
    inputs = {f"the cache (VTLAB_CACHE={cache_root()})": cache_root()}
    corpus = _select(cfg, "export.vectors.corpus")
    if corpus and str(corpus) != "eval":
        inputs[f"the corpus read (export.vectors.corpus={corpus})"] = Path(str(corpus))
    overwrite = bool(_select(cfg, "export.overwrite"))
    for key, (path, default) in export_targets(cfg, this).items():
        replaces = key == "export.out"
        why = output_problem(path, source=source, this=this, default=default, inputs=inputs, replaces=replaces)
        if why is not None:
            raise ConfigError(
                f"{key}={path}: {why}; an export never replaces or writes into an input or another "
                "run: choose a new directory",
                key=key,
            )
        if replaces:
            check_export_target(path, overwrite, key)


def check_paths(cfg: DictConfig, this: Path | None = None) -> None:
    """Every path check of this module on `cfg`; `this`: the run directory (default: paths.run_dir, when it
    resolves)."""
    check_names(cfg)
    check_export_paths(cfg, this)
