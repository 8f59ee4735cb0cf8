"""vtlab: Vocabulary Transfer for learned sparse retrieval (SPLADE) on modern encoders."""

from pathlib import Path

from omegaconf import OmegaConf

__version__ = "0.1.0"


def _data_name(name: object = None, path: object = None) -> str:
    """The run name's data part (conf/config.yaml `name`): "-<eval name>", else "-<the eval directory's name>"."""
    label = str(name) if name else Path(str(path).rstrip("/")).expanduser().name if path else ""
    return f"-{label}" if label and label != "none" else ""


OmegaConf.register_new_resolver("vtlab.data_name", _data_name, replace=True)
