"""Memory reuse between batches: glibc told to keep freed memory (vtlab.runtime.allocator) stops the kernel refaulting
the same tens of MiB for every batch, and the encoder's body in row chunks (vtlab.runtime.body.head_inputs) gives the
hidden states of one pass. Every comparison runs in fp32 (no autocast), against the unchunked network."""

import os
import platform
import subprocess
import sys

import numpy as np
import pytest
import torch
from transformers import BertConfig

from vtlab.backbones import Backbone, decoder_bypassed
from vtlab.data.boolq import probe_texts
from vtlab.models.encoder import SpladeEncoder
from vtlab.runtime import body as body_module
from vtlab.runtime.allocator import USER_SETTINGS
from vtlab.runtime.body import body_rows, head_inputs

MiB = 2**20

# a forward pass's pattern: tens of MiB allocated, touched and freed, again and again; prints faulted pages per page
ALLOCATE = """
import resource, sys
from vtlab.runtime.allocator import keep_freed_memory
print(keep_freed_memory() if sys.argv[1] == "keep" else None)
MiB = 2**20
def faults(): return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def step():
    a = bytearray(24 * MiB); b = bytearray(16 * MiB); c = bytearray(8 * MiB)
    del a, b, c
step(); step()
f0 = faults()
for _ in range(5): step()
print((faults() - f0) / 5 / (48 * MiB / 4096))
"""


def _faults_per_page(mode: str) -> tuple[str, float]:
    env = {k: v for k, v in os.environ.items() if k not in USER_SETTINGS and k != "GLIBC_TUNABLES"}
    out = subprocess.run(
        [sys.executable, "-c", ALLOCATE, mode], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    return out[0], float(out[1])


@pytest.mark.cli
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_keep_freed_memory_stops_the_kernel_refaulting_each_step():
    set_, kept = _faults_per_page("keep")
    _, default = _faults_per_page("default")
    assert set_ == "True"
    # glibc 2.36's defaults: ~1.0 (every page of every step fresh from the kernel); kept: 0
    assert kept < 0.05, f"{kept:.2f} pages faulted per page allocated per step (glibc's defaults: {default:.2f})"


def test_keep_freed_memory_leaves_the_users_malloc_settings(monkeypatch):
    from vtlab.runtime.allocator import keep_freed_memory

    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert keep_freed_memory() is False


def test_body_rows_keeps_the_widest_activation_within_the_budget():
    cfg = BertConfig(hidden_size=128, intermediate_size=512, num_attention_heads=2)
    assert body_rows(cfg, 256, 16 * MiB) == 32  # 32 × 256 × 512 × 4 bytes = 16 MiB exactly
    assert body_rows(cfg, 64, 16 * MiB) == 128
    assert body_rows(cfg, 256, 1) == 1  # never fewer than one row
    long = BertConfig(hidden_size=768, intermediate_size=3072, num_attention_heads=16)
    assert body_rows(long, 8192, 2**33) == 2  # the attention scores (16 × 8192 per position) are the widest
    assert body_rows(long, 128, 2**33) == 2**33 // (128 * 3072 * 4)  # the FFN is
    no_ffn = type("Config", (), {"hidden_size": 64})()
    assert body_rows(no_ffn, 100, 256 * 100 * 4 * 3) == 3  # without intermediate_size: 4 × hidden


@pytest.fixture(scope="module")
def tiny():
    b = Backbone("asset:splade-tiny")
    return b.load_model().eval(), b.load_tokenizer()


@pytest.fixture(scope="module")
def passages():
    return list(probe_texts()[1][:24])


def _calls(net: torch.nn.Module) -> list[int]:
    calls: list[int] = []
    net.register_forward_pre_hook(lambda m, a, kw: calls.append(kw["input_ids"].shape[0]), with_kwargs=True)
    return calls


def test_head_inputs_in_chunks_equal_one_pass(tiny, passages):
    net, tok = tiny
    batch = tok(passages[:8], padding=True, truncation=True, max_length=128, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    budget = 3 * ids.shape[1] * net.config.intermediate_size * 4  # three rows per pass
    with decoder_bypassed(net):
        with torch.inference_mode():
            whole = net(input_ids=ids, attention_mask=mask).logits
            calls = _calls(net)
            chunked = head_inputs(net, ids, mask, budget)
        assert calls == [3, 3, 2]
        torch.testing.assert_close(chunked, whole, rtol=1e-5, atol=1e-5)
        calls.clear()
        with torch.enable_grad():
            head_inputs(net, ids, mask, budget)  # training: one pass
        assert calls == [8]
    net._forward_pre_hooks.clear()


def test_encode_with_a_small_body_budget_equals_the_default(tiny, passages, monkeypatch):
    enc = SpladeEncoder(*tiny, precision="fp32")
    default = enc.encode(passages, "doc", batch_size=8, show_progress=False).toarray()
    monkeypatch.setattr(body_module, "BODY_BYTES", 4096)  # one row per pass
    calls = _calls(enc.model)
    chunked = enc.encode(passages, "doc", batch_size=8, show_progress=False).toarray()
    enc.model._forward_pre_hooks.clear()
    assert calls and set(calls) == {1}
    np.testing.assert_allclose(chunked, default, rtol=1e-5, atol=1e-5)


class _Recorder(torch.nn.Module):
    """Records the rows of each forward pass; its output is the input ids as hidden states (dispatch only)."""

    config = BertConfig(hidden_size=8, intermediate_size=32, num_attention_heads=1)

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[int] = []

    def forward(self, input_ids, attention_mask):
        self.rows.append(input_ids.shape[0])
        return type("Out", (), {"logits": input_ids.unsqueeze(-1).float()})()


def test_head_inputs_runs_one_pass_off_cpu():
    net = _Recorder()
    ids = torch.arange(40, device="meta").view(10, 4)  # no arithmetic: only which device it is on matters
    with torch.inference_mode():
        head_inputs(net, ids, ids, budget_bytes=4 * 32 * 4)  # one row per pass, were it on CPU
    assert net.rows == [10]
    cpu_ids = torch.arange(40).view(10, 4)
    with torch.inference_mode():
        out = head_inputs(net, cpu_ids, cpu_ids, budget_bytes=4 * 32 * 4)
    assert net.rows == [10, *[1] * 10]
    assert torch.equal(out.squeeze(-1), cpu_ids.float())  # the chunks back in order
