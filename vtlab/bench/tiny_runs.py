"""The smallest runs a check or a test starts, as Hydra overrides (no import: tests/helpers.py reads them at
collection time)."""

# the smallest SPLADE-tiny fine-tune a check (or a test: tests/helpers.py) starts, its stage, steps and trainer added
TINY_FINETUNE = [
    "backbone=splade-tiny",
    "vocab=native",
    "apc=off",
    "baseline=false",
    "logger=none",
    "data.batch_size=2",
    "data.doc_max_length=32",
    "data.dev.dev_size=10",
    "data.dev.max_docs=50",
]
