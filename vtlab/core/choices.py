"""The closed choices of the config that vtlab itself defines, declared once, as types: the library types its
parameters with them (`model.encoder.precision`: vtlab.models.encoder.SpladeEncoder; vtlab.runtime.precision reads its
values from the same type), and vtlab.runs.checks reads their values (`typing.get_args`) to check a config before any
model loads. A new choice is a new value here, and the check accepts it with no edit of its own.

Choices declared elsewhere are read where they are declared: `trainer.precision` from the Lightning Trainer's own type
of its `precision` parameter (plus TrainerPrecision below), `eval.index` from the nodes of vtlab/index/indexes.yaml
(vtlab.core.paths.INDEXES_FILE).
"""

from __future__ import annotations

from typing import Literal

# model.encoder.precision: what encode() computes in (vtlab/runtime/precision.py: auto, native by the CPU's flags, ...)
EncoderPrecision = Literal["auto", "native", "fp32", "bf16", "int8"]
# trainer.precision values of vtlab's own, beside the Trainer's: vtlab.runtime.precision.trainer_precision resolves
# `native` to bf16-mixed or 32-true (by the device) before the Trainer sees it
TrainerPrecision = Literal["native"]
# export.onnx_int8: whom the int8 ONNX graphs are made for (vtlab/export/onnx_int8.py: portable holds on every x86 CPU)
OnnxInt8Target = Literal["portable", "vnni"]
# init.similarity: how semantic init scores a new token against the overlap (vtlab.vocab.init.Semantic and Auto)
Similarity = Literal["cosine", "pmi", "zscore"]
# transfer.bias: the new MLM output bias (vtlab.vocab.transfer.TransferOptions: z-mapped target bias, like the
# embeddings, or zeros)
TransferBias = Literal["zmap", "zeros", "init"]
# callbacks.collapse_detector.action: what a persisting collapse does (vtlab.callbacks.collapse_detector)
CollapseAction = Literal["warn", "stop"]
# regularizer.*.normalize: how FLOPS averages document rows over query groups (vtlab.regularizers.flops.Flops)
FlopsNormalization = Literal["global", "per_group"]
