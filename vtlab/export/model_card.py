"""The model card (README.md) of an exported SparseEncoder directory, ready for the Hugging Face Hub: YAML front
matter as sentence-transformers writes it for sparse encoders (library, pipeline tag, tags, base model, datasets,
license, model-index with the run's results), what the model is and where it came from, the commands that made it,
its quality (retrieval measures and sparsity) apart from its timings, and how to load it and feed an engine.

A card leaves the machine that wrote it: it holds no absolute path. Files of the same export are given relative to
the card, commands with `<run dir>` for the trained run's directory and `.../<name>` for any other absolute path.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

import yaml
from omegaconf import OmegaConf

from vtlab.core.errors import ConfigError
from vtlab.core.json_files import JsonFileError, read_json
from vtlab.core.records import RecordError, load_record
from vtlab.evaluation import SPARSITY_KEYS, TIMING_KEYS, split_budget_key
from vtlab.export.hub import hub_datasets, hub_model_id
from vtlab.export.run_config import RunConfig

log = logging.getLogger("vtlab")

RUN_DIR = "<run dir>"  # how a card names the trained run's directory
# the model-index task, as sentence-transformers' SparseInformationRetrievalEvaluator reports it
TASK = {"type": "sparse-information-retrieval", "name": "Sparse Information Retrieval"}
# ir_measures names → sentence-transformers' metric ids (dot: the similarity; nDCG@10 → dot_ndcg@10)
METRIC_IDS = {"nDCG": "ndcg", "RR": "mrr", "R": "recall", "P": "precision", "AP": "map"}
QUALITY_FORMATS = {"query_active_dims": "{:.1f}", "doc_active_dims": "{:.1f}", "flops": "{:.3f}"}
TIMING_FORMATS = {
    "choose_precision_s": "{:.1f} s",
    "encode_query_s": "{:.1f} s",
    "encode_query_ms_per_query": "{:.2f} ms",
    "encode_doc_s": "{:.1f} s",
    "index_build_s": "{:.2f} s",
    "search_ms_per_query": "{:.3f} ms",
    "total_s": "{:.1f} s",
}
# a sentence the card adds after its first paragraph, by encoder kind
QUERY_NOTES = {"inference-free": "Queries run no network: a query is its distinct tokens weighted by relu(idf)."}
# the card's fixed text and layout, with ${name} placeholders (string.Template) filled by card_fields; each optional
# section's own text in a template of its own beside it
TEMPLATES = Path(__file__).with_name("templates")
TEMPLATE = TEMPLATES / "model_card.md"
# a template line that is one placeholder and nothing else
_LONE_PLACEHOLDER = re.compile(r"\$(\w+|\{\w+\})")
# Hydra's default run directory name is <HH-MM-SS>-<name>: a title never shows the time
_TIMESTAMP = re.compile(r"^\d{2}-\d{2}-\d{2}-")
# an absolute path inside a command-line override: after =, [, {, a comma, a colon, a quote or a blank (not a URL)
_ABS_PATH = re.compile(r"(?<=[=\[{,:'\"\s])~?/(?!/)[^\s,\]}'\"]*")


def run_overrides(run_dir: Path | None) -> list[str] | None:
    """The command-line overrides Hydra recorded for a run (<run_dir>/.hydra/overrides.yaml), None if absent."""
    path = None if run_dir is None else Path(run_dir) / ".hydra" / "overrides.yaml"
    if path is None or not path.is_file():
        return None
    try:
        data = load_record(path)  # bounded: no aliases, no file past a record's size
    except RecordError as e:  # names the file
        raise ConfigError(f"{e}: expected the overrides.yaml a vtlab run writes") from None
    return [str(x) for x in OmegaConf.to_container(data, resolve=False)] if OmegaConf.is_list(data) else None


def run_metrics(run_dir: Path | None) -> dict[str, dict[str, float]]:
    """collection → {measure: value} from <run_dir>/eval/*/metrics.json (unreadable files are skipped, logged)."""
    out: dict[str, dict[str, float]] = {}
    if run_dir is None:
        return out
    for path in sorted(Path(run_dir).glob("eval/*/metrics.json")):
        try:
            metrics = read_json(path).get("metrics")
        except JsonFileError as exc:
            log.warning("model card: %s skipped (%s)", path, exc)
            continue
        if isinstance(metrics, dict):
            flat = _flatten(metrics)
            if flat:
                out[path.parent.name] = flat
    return out


def _flatten(metrics: dict[str, Any], prefix: str = "") -> dict[str, float]:
    flat: dict[str, float] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name} / "))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[name] = float(value)
    return flat


# ---- what the card says about the model ---------------------------------------------------------------------------
@dataclass(frozen=True)
class CardInfo:
    """Where the model came from, every field portable (names and hub ids, no paths)."""

    title: str
    run: str | None = None  # the vtlab run's name
    backbone: str | None = None  # the backbone config's name
    base_model: str | None = None  # its hub id, when it has one
    vocab: str | None = None
    init: str | None = None
    train_datasets: tuple[str, ...] = ()  # hub ids of the training data
    eval_datasets: dict[str, str] = field(default_factory=dict)  # eval collection → its hub dataset id
    license: str | None = None
    repo_id: str | None = None  # the Hub repo it is pushed to


def _text(value: Any) -> str | None:
    return str(value) if isinstance(value, (str, int, float)) and str(value) else None


def card_title(name: str | None, run_dir: Path | None) -> str:
    """export.name, else the run's configured name, else its directory's name without Hydra's time prefix."""
    if name:
        return name
    stripped = _TIMESTAMP.sub("", run_dir.name) if run_dir is not None else ""
    return stripped if stripped and not stripped.isdigit() else "vtlab-sparse-encoder"


def card_info(
    run: RunConfig, *, name: str | None, run_dir: Path | None, trained: bool, license: str | None, repo_id: str | None
) -> CardInfo:
    """The card's facts from the describing config (`run`: the trained run's recorded one, or the export's own);
    training datasets only for a trained model (`trained`)."""
    run_name = _text(run.value("name"))
    train = hub_datasets(run.value("data.train")) if trained else {}
    evals = hub_datasets(run.value("eval"))
    return CardInfo(
        title=card_title(name or run_name, run_dir),
        run=run_name if trained or run_dir else None,
        backbone=_text(run.value("backbone.name")),
        base_model=hub_model_id(run.value("backbone.name_or_path")),
        vocab=_text(run.value("vocab.name")),
        init=_text(run.value("init.name")),
        train_datasets=tuple(dict.fromkeys(i for ids in train.values() for i in ids)),
        eval_datasets={coll: ids[0] for coll, ids in evals.items()},
        license=license or None,
        repo_id=repo_id,
    )


# ---- portable paths and commands ------------------------------------------------------------------------------------
def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def portable_path(path: Path, card_dir: Path, run_dir: Path | None) -> str:
    """`path` as a card may show it: relative to the card's directory when both lie in `run_dir`
    (../vectors/anserini/docs.jsonl), `<run dir>/...` when only the path does, else `.../<folder>/<file>`."""
    p = Path(os.path.abspath(path))
    if run_dir is not None:
        root = Path(os.path.abspath(run_dir))
        if _inside(p, root):
            if _inside(Path(os.path.abspath(card_dir)), root):
                return Path(os.path.relpath(p, os.path.abspath(card_dir))).as_posix()
            rel = p.relative_to(root).as_posix()
            return RUN_DIR if rel == "." else f"{RUN_DIR}/{rel}"
    return f".../{p.parent.name}/{p.name}" if p.parent.name else f".../{p.name}"


def portable_values(value: Any, card_dir: Path, run_dir: Path | None) -> Any:
    """`value` (a manifest: dicts, lists, strings) with every absolute path made portable as in `portable_path`, so a
    directory uploaded to the Hub carries no path of the machine that made it."""
    if isinstance(value, dict):
        return {k: portable_values(v, card_dir, run_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [portable_values(v, card_dir, run_dir) for v in value]
    if isinstance(value, str) and os.path.isabs(value):
        return portable_path(Path(value), card_dir, run_dir)
    return value


def portable_command(overrides: Sequence[str] | None, run_dir: Path | None) -> str:
    """`python -m vtlab <overrides>` with each absolute path as `<run dir>/...` (inside the trained run's
    directory) or `.../<name>`."""
    if overrides is None:
        return "(not recorded)"

    def repl(match: re.Match[str]) -> str:
        p = Path(os.path.expanduser(match.group(0)))
        if run_dir is not None and _inside(Path(os.path.abspath(p)), Path(os.path.abspath(run_dir))):
            rel = Path(os.path.abspath(p)).relative_to(os.path.abspath(run_dir)).as_posix()
            return RUN_DIR if rel == "." else f"{RUN_DIR}/{rel}"
        return f".../{p.name}" if p.name else "..."

    return "python -m vtlab " + " ".join(_ABS_PATH.sub(repl, f"={o}")[1:] for o in overrides)


# ---- metrics --------------------------------------------------------------------------------------------------------
def _base(key: str) -> str:
    return split_budget_key(key)[0]


def quality_keys(metrics: Mapping[str, float]) -> list[str]:
    """Retrieval measures, then sparsity (budgeted variants included); never a timing."""
    measures = [k for k in metrics if _base(k) not in SPARSITY_KEYS and _base(k) not in TIMING_KEYS]
    return measures + [k for k in metrics if _base(k) in SPARSITY_KEYS]


def metric_id(key: str) -> str:
    """A measure's model-index id in sentence-transformers' style (nDCG@10 → dot_ndcg@10); sparsity keys as is."""
    if _base(key) in SPARSITY_KEYS:
        return key
    measure, at, rest = key.partition("@")
    return f"dot_{METRIC_IDS.get(measure, measure.lower())}{at}{rest}"


def model_index(title: str, metrics: Mapping[str, Mapping[str, float]], hub_ids: Mapping[str, str]) -> list[dict]:
    """The Hub's `model-index`: one retrieval result per evaluated collection, its quality values as recorded."""
    results = [
        {
            "task": dict(TASK),
            "dataset": {"name": coll, "type": hub_ids.get(coll, coll)},
            "metrics": [{"type": metric_id(k), "value": float(ms[k]), "name": k} for k in quality_keys(ms)],
        }
        for coll, ms in metrics.items()
        if quality_keys(ms)
    ]
    return [{"name": title, "results": results}] if results else []


def front_matter(info: CardInfo, kind: str, metrics: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    tags = ["sentence-transformers", "sparse-encoder", "sparse", "splade", "vtlab"]
    tags += [t for t in (kind if kind != "siamese" else None, info.backbone, info.vocab) if t and t not in tags]
    meta: dict[str, Any] = {"library_name": "sentence-transformers", "pipeline_tag": "feature-extraction", "tags": tags}
    if info.base_model:
        meta["base_model"] = info.base_model
    datasets = list(dict.fromkeys([*info.train_datasets, *info.eval_datasets.values()]))
    if datasets:
        meta["datasets"] = datasets
    if info.license:
        meta["license"] = info.license
    index = model_index(info.title, metrics, info.eval_datasets)
    if index:
        meta["model-index"] = index
    return meta


def _table(
    header: tuple[str, str],
    metrics: Mapping[str, Mapping[str, float]],
    keys: Callable[[Mapping[str, float]], list[str]],
    formats: Mapping[str, str],
    default: str,
) -> str:
    lines = [f"| collection | {header[0]} | {header[1]} |", "|---|---|---|"]
    for coll, ms in metrics.items():
        lines += [f"| {coll} | {k} | {formats.get(_base(k), default).format(ms[k])} |" for k in keys(ms)]
    return "\n".join(lines)


def timing_keys(metrics: Mapping[str, float]) -> list[str]:
    return [k for k in metrics if _base(k) in TIMING_KEYS]


# ---- the card's sections: each the Markdown that fills one placeholder of the template ("" leaves it out) -----------
def base_model_text(info: CardInfo) -> str:
    if info.base_model:
        return f"[{info.base_model}](https://huggingface.co/{info.base_model})"
    if info.backbone:
        return f"`{info.backbone}` (no Hub id: an offline asset or a local model)"
    return "unknown"


def license_text(info: CardInfo) -> str:
    return info.license or "not stated (vtlab does not know the terms of the base model and data; set `export.license`)"


def training_data_item(info: CardInfo) -> str:
    links = ", ".join(f"[{d}](https://huggingface.co/datasets/{d})" for d in info.train_datasets)
    return f"- **Training data:** {links}" if links else ""


def section(name: str, **fields: str) -> str:
    """templates/<name>.md filled with `fields` (as the card's template is), without its final newline."""
    return fill_template((TEMPLATES / f"{name}.md").read_text(encoding="utf-8"), fields).removesuffix("\n")


def evaluation_section(metrics: Mapping[str, Mapping[str, float]]) -> str:
    """The quality table, then the timings apart (only where a collection has timings)."""
    if not metrics:
        return section("no_evaluation")
    quality = _table(("measure", "value"), metrics, quality_keys, QUALITY_FORMATS, "{:.4f}")
    timed = {coll: ms for coll, ms in metrics.items() if timing_keys(ms)}
    timings = ""
    if timed:
        timings = section(
            "timings", timing_table=_table(("timing", "value"), timed, timing_keys, TIMING_FORMATS, "{:.4g}")
        )
    return section("evaluation", quality_table=quality, timings=timings)


def vector_files_list(
    vector_files: Mapping[str, Path], vectors_of: str | None, card_dir: Path, run_dir: Path | None
) -> str:
    if not vector_files:
        return ""
    files = [f"- {fmt}: `{portable_path(path, card_dir, run_dir)}`" for fmt, path in vector_files.items()]
    return section("vectors", of=f" of {vectors_of}" if vectors_of else "", files="\n".join(files))


def train_command(overrides: Sequence[str] | None, run_dir: Path | None) -> str:
    """The trained run's command, under a comment; "" when the export has no recorded run."""
    return "" if overrides is None else f"# the run\n{portable_command(overrides, run_dir)}"


def formats_item(formats: Sequence[str]) -> str:
    names = ", ".join(formats)
    return f"- Every engine format vtlab writes (`export.vectors.formats`): {names}." if names else ""


def onnx_section(onnx_dir: str | None) -> str:
    return section("onnx", onnx_dir=onnx_dir) if onnx_dir else ""


# ---- the card -------------------------------------------------------------------------------------------------------
def fill_template(template: str, fields: Mapping[str, str]) -> str:
    """`template` with each ${name} replaced by fields[name] (string.Template: no code runs; a name without a field
    raises KeyError). A placeholder alone on its line that fills to "" takes its line with it, and the blank lines
    around it never become two in a row (so an absent section leaves no hole in a list or run of blank lines); the
    fields' own text is never touched."""
    out: list[str] = []
    for line in template.splitlines():
        text = Template(line).substitute(fields)
        if not text and (_LONE_PLACEHOLDER.fullmatch(line) or not out or not out[-1]):
            continue
        out.append(text)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n"


def card_fields(
    info: CardInfo,
    encoder: Mapping[str, Any],
    *,
    train_overrides: Sequence[str] | None,
    export_overrides: Sequence[str] | None,
    metrics: Mapping[str, Mapping[str, float]],
    vector_files: Mapping[str, Path],
    vectors_of: str | None,
    onnx_dir: str | None,
    card_dir: Path,
    run_dir: Path | None,
    formats: Sequence[str],
) -> dict[str, str]:
    """The text of each placeholder of the card's template (arguments as `model_card`'s)."""
    kind = encoder.get("kind", "siamese")
    lengths = encoder.get("max_length", {})
    meta = front_matter(info, kind, metrics)
    return {
        "front_matter": yaml.safe_dump(meta, sort_keys=False, allow_unicode=True).rstrip(),
        "title": info.title,
        "kind": str(kind),
        "vocab_size": str(encoder.get("vocab_size")),
        "activation": "log1p(log1p(relu(·)))" if encoder.get("double_log") else "log1p(relu(·))",
        "query_note": QUERY_NOTES.get(kind, ""),
        "base_model": base_model_text(info),
        "vocab": info.vocab or "unknown",
        "init": f", `init={info.init}`" if info.init else "",
        "query_length": str(lengths.get("query")),
        "doc_length": str(lengths.get("doc")),
        "training_data": training_data_item(info),
        "license": license_text(info),
        "run": f"- **vtlab run:** `{info.run}`" if info.run else "",
        "train_command": train_command(train_overrides, run_dir),
        "export_command": portable_command(export_overrides, run_dir),
        "evaluation": evaluation_section(metrics),
        "model_id": info.repo_id or "path/to/this/directory",
        "vector_files": vector_files_list(vector_files, vectors_of, card_dir, run_dir),
        "formats": formats_item(formats),
        "onnx": onnx_section(onnx_dir),
    }


def model_card(
    info: CardInfo,
    encoder: dict[str, Any],
    *,
    train_overrides: Sequence[str] | None,
    export_overrides: Sequence[str] | None,
    metrics: dict[str, dict[str, float]],
    vector_files: Mapping[str, Path],
    vectors_of: str | None,
    onnx_dir: str | None,
    card_dir: Path,
    run_dir: Path | None,
    formats: Sequence[str] = (),
) -> str:
    """The README.md text: the template (TEMPLATE) filled with `card_fields`. `encoder`:
    vtlab.export.sentence_transformers.encoder_settings(); `vector_files`: format → path written by the same export
    (of the collection `vectors_of`); `formats`: every export.vectors.formats choice
    (vtlab.export.vectors.format_names); `onnx_dir`: the ONNX subdirectory, if exported;
    `card_dir`: where the card is written; `run_dir`: the trained run's directory (paths are shown relative to it)."""
    fields = card_fields(
        info,
        encoder,
        train_overrides=train_overrides,
        export_overrides=export_overrides,
        metrics=metrics,
        vector_files=vector_files,
        vectors_of=vectors_of,
        onnx_dir=onnx_dir,
        card_dir=card_dir,
        run_dir=run_dir,
        formats=formats,
    )
    return fill_template(TEMPLATE.read_text(encoding="utf-8"), fields)
