"""vtlab: Vocabulary Transfer for learned sparse retrieval (SPLADE) on modern encoders."""

from pathlib import Path

from omegaconf import OmegaConf

__version__ = "0.1.0"

TEXT_SUFFIXES = (".jsonl", ".json", ".txt", ".tsv")  # a data file's label leaves its suffix off


def _label(value: object) -> str:
    """A data set's name or path as a label: a name as is, a directory by its name, a file by its stem, a BEIR
    corpus.jsonl by its directory's name."""
    path = Path(str(value).rstrip("/")).expanduser()
    if path.suffix in TEXT_SUFFIXES:
        path = path.parent if path.name == "corpus.jsonl" and path.parent.name else path.with_suffix("")
    return path.name


def _data_label(*candidates: object) -> str | None:
    """The label of the data a stage reads (conf/stage/*.yaml `data`): the first candidate set (a name or a path),
    None when none is; "none" (eval=none) is none."""
    label = next((_label(c) for c in candidates if c is not None and str(c) != ""), None)
    return label if label and label != "none" else None


def _data_name(*candidates: object) -> str:
    """The run name's data part (conf/config.yaml `name`): "-<label>" of the first candidate set, else ""."""
    label = _data_label(*candidates)
    return f"-{label}" if label else ""


def _when(flag: object, value: object) -> object:
    """`value` when `flag` is true, else None (a candidate of vtlab.data_label that only counts under a setting)."""
    return value if flag is True else None


def _split(total: object, *parts: object) -> int:
    """`total` over the product of `parts`, exactly (a global batch over GPUs, nodes and a per-device batch: the share
    or the accumulation that keeps the total); ValueError when it leaves a remainder (vtlab.runs.checks refuses such a
    GPU count in one line before anything resolves it)."""
    share, product = int(str(total)), 1
    for part in parts:
        product *= int(str(part))
    if product < 1 or share % product:
        raise ValueError(f"{total} does not split into {' × '.join(map(str, parts))}")
    return share // product


def _mini_batch(batch: object, mini: object) -> int | None:
    """The cached loss's mini-batch (model.cached_mini_batch) that keeps `mini` queries per forward pass: None (one
    pass) when the device's `batch` is no larger."""
    return None if int(str(batch)) <= int(str(mini)) else int(str(mini))


OmegaConf.register_new_resolver("vtlab.data_label", _data_label, replace=True)
OmegaConf.register_new_resolver("vtlab.data_name", _data_name, replace=True)
OmegaConf.register_new_resolver("vtlab.when", _when, replace=True)
OmegaConf.register_new_resolver("vtlab.split", _split, replace=True)
OmegaConf.register_new_resolver("vtlab.mini_batch", _mini_batch, replace=True)
