"""On an accelerator, `auto` and `native` run what training runs there: bf16 on a GPU that computes it in hardware
(trainer=gpu trains in bf16-mixed), else fp32; the CPU's choice is unchanged."""

from __future__ import annotations

import pytest
import torch

from vtlab.runtime import precision as prec


@pytest.mark.parametrize(("bf16", "expected"), [(True, "bf16"), (False, "fp32")])
def test_auto_on_a_cuda_device_follows_its_bf16(monkeypatch, bf16, expected) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(
        torch.cuda, "is_bf16_supported", lambda including_emulation=True: bf16 and not including_emulation
    )
    assert prec.resolve_precision("auto", "cuda") == expected
    assert prec.resolve_precision("auto", torch.device("cuda", 1)) == expected
    assert prec.resolve_precision("native", "cuda:0") == expected
    assert prec.auto_candidates("cuda") == (expected,)
    assert prec.resolve_precision("fp32", "cuda") == "fp32"  # a precision given is kept


def test_without_a_visible_gpu_a_cuda_device_computes_fp32(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert prec.resolve_precision("auto", "cuda") == "fp32"


def test_the_evaluation_moves_the_encoder_to_the_trainers_root_device() -> None:
    """vtlab.stages.evaluate.on_device: the encoder's parameters end on the device the world names ("meta" stands
    for an accelerator this machine lacks: the move is the same call)."""
    from transformers import BertConfig, BertForMaskedLM

    from vtlab.models.encoder import SpladeEncoder
    from vtlab.stages.evaluate import on_device

    config = BertConfig(vocab_size=32, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16)
    encoder = SpladeEncoder(BertForMaskedLM(config), None, precision="fp32")
    moved = on_device(encoder, torch.device("meta"))
    assert {p.device.type for p in moved.parameters()} == {"meta"}
    assert on_device("bm25", torch.device("meta")) == "bm25"  # an encoder with no network stays as it is
