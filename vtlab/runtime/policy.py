"""How an encoder computes on this machine: the one interface of vtlab/runtime/ that the method's modules use.

An encoder (vtlab.models.encoder) tokenizes, runs its networks and pools; it asks its ComputePolicy which precision
encode() runs (`model.encoder.precision`: fp32, bf16, int8, `native` by the CPU's flags, or `auto`, timed once per
model on probe texts the encoder is given), the context its forward passes run under, and the masked max of the MLM
logits — on the CPU in cache-sized tiles or by a fused kernel, on an accelerator in large column blocks
(vtlab.runtime.pooling), by the network's int8 copy inside int8 mode (vtlab.runtime.quantize), with the body in row
chunks (vtlab.runtime.body).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import scipy.sparse as sp
import torch
from torch import Tensor, nn

from vtlab.backbones import decoder_bypassed
from vtlab.core.atomic import stable_hash
from vtlab.core.errors import VtlabError
from vtlab.runtime import precision as prec
from vtlab.runtime.body import head_inputs
from vtlab.runtime.pooling import DEFAULT_CHUNK_BYTES, max_logits, tiled_max_logits
from vtlab.runtime.precision import Choice, check_precision, trainer_precision
from vtlab.runtime.quantize import Int8Network, int8_unavailable, quantize_network, require_int8, weights_version

__all__ = ["DEFAULT_CHUNK_BYTES", "Choice", "ComputePolicy", "ProbeTexts", "check_precision", "trainer_precision"]

ProbeTexts = Callable[[], tuple[Sequence[str], Sequence[str]]]  # () → (queries, passages) for auto's int8 check
Forward = Callable[[Tensor, Tensor, str], Tensor]
_CACHES = ("_int8_nets", "_int8_active", "_auto")  # per-process state: never copied, pickled or saved


class Encodes(Protocol):
    """What the policy needs of the encoder it serves."""

    training: bool
    double_log: bool
    max_length: dict[str, int]
    tokenizer: Any

    def networks(self) -> list[nn.Module]: ...

    def pooled(self, input_ids: Tensor, attention_mask: Tensor, side: str) -> Tensor: ...

    def encode_as(
        self, precision: str, texts: Sequence[str], side: str, batch_size: int, show_progress: bool, forward: Forward
    ) -> sp.csr_matrix: ...


class ComputePolicy:
    """`precision` (checked here: a bad value fails at construction), the pooling tile size, and where auto's probe
    texts come from (None: auto does not consider int8)."""

    def __init__(
        self, precision: str = "auto", chunk_bytes: int = DEFAULT_CHUNK_BYTES, probe: ProbeTexts | None = None
    ):
        check_precision(precision)
        self.precision = precision
        self.chunk_bytes = chunk_bytes
        self.probe = probe
        self.reset()

    def reset(self) -> None:
        self._int8_nets: dict[int, Int8Network] = {}  # id(fp32 network) → its int8 copy
        self._int8_active = False  # set by int8_networks(): max_logits runs the int8 copies
        self._auto: tuple[Any, Choice] | None = None  # (what it was decided for, auto's choice)

    def __getstate__(self) -> dict[str, Any]:
        # packed int8 weights do not pickle or deepcopy; they are rebuilt on use (so is auto's choice)
        return {k: v for k, v in self.__dict__.items() if k not in _CACHES}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.reset()

    def check_trainable(self) -> None:
        if self.precision == "int8":
            raise VtlabError(
                "model.encoder.precision=int8 is for encoding only (int8 weights cannot be trained): "
                "train with auto, fp32 or bf16"
            )

    # ---- the pooled logits -------------------------------------------------------------------------------------------
    def max_logits(self, net: nn.Module, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        """Raw per-term max over non-pad positions of `net`'s MLM logits, [B, V]; inside int8_networks() computed by
        the network's int8 copy."""
        if self._int8_active:
            q = self._int8_network(net)
            with decoder_bypassed(q.net), q.body():
                hidden = head_inputs(q.net, input_ids, attention_mask)
            return tiled_max_logits(hidden.float(), q.decoder, attention_mask, self.chunk_bytes)
        with decoder_bypassed(net) as decoder:
            hidden = head_inputs(net, input_ids, attention_mask)
        return max_logits(hidden, decoder.weight, decoder.bias, attention_mask, self.chunk_bytes)

    def _int8_network(self, net: nn.Module) -> Int8Network:
        """The int8 copy of `net`, made on first use and again after its weights change (training, APC, loading)."""
        q = self._int8_nets.get(id(net))
        if q is None or q.version != weights_version(net):
            q = self._int8_nets[id(net)] = quantize_network(net)
        return q

    @contextlib.contextmanager
    def int8_networks(self, training: bool = False) -> Iterator[None]:
        """Forward passes inside run the networks' int8 copies (the fp32 networks are left as they are)."""
        require_int8()
        if training:
            raise VtlabError("model.encoder.precision=int8 is for encoding only: the encoder is in training mode")
        before, self._int8_active = self._int8_active, True
        try:
            yield
        finally:
            self._int8_active = before

    def runner(self, precision: str, device_type: str, training: bool) -> AbstractContextManager[Any]:
        """The context a forward pass in `precision` runs under: bf16 autocast; int8 swaps in the int8 copies."""
        if precision == "bf16":
            return torch.autocast(device_type, dtype=torch.bfloat16)
        if precision == "int8":
            return self.int8_networks(training)
        return contextlib.nullcontext()

    # ---- which precision ---------------------------------------------------------------------------------------------
    def resolved(self, owner: Encodes, device: str | torch.device = "cpu") -> str:
        """The precision encode() runs: `precision`, or auto's choice for `owner`'s networks (its int8 check runs once
        per weights, cached on disk; one log line says which and why)."""
        device = torch.device(device)
        if self.precision == "int8":
            require_int8()
            if device.type != "cpu":
                raise VtlabError(f"model.encoder.precision=int8 runs on CPU only (the encoder is on {device.type})")
        if self.precision == "native":
            return prec.native_precision(device)
        if self.precision != "auto":
            return self.precision
        candidates = prec.auto_candidates(device)
        decided_for = (candidates, *(weights_version(net) for net in owner.networks()))
        if self._auto is None or self._auto[0] != decided_for:
            self._auto = (decided_for, self._choose_auto(owner, candidates))
        return self._auto[1].precision

    def auto_choice(self, owner: Encodes, device: str | torch.device = "cpu") -> Choice:
        """What precision=auto runs for `owner` on `device`, and why (its check runs now if it has not)."""
        if self.precision != "auto":
            raise ValueError(f"auto_choice: this encoder's precision is {self.precision!r}, not 'auto'")
        self.resolved(owner, device)
        return self._auto[1]

    def computing(self, owner: Encodes, device: str | torch.device = "cpu") -> AbstractContextManager[Any]:
        """The context forward passes run under for the resolved precision."""
        device = torch.device(device)
        return self.runner(self.resolved(owner, device), device.type, owner.training)

    def _choose_auto(self, owner: Encodes, candidates: tuple[str, ...]) -> Choice:
        why_not = int8_unavailable() if "int8" in candidates else None
        probe = None
        # the texts only where the check will run: a forced precision ($VTLAB_AUTO_PRECISION) needs none
        if "int8" in candidates and why_not is None and len(candidates) > 1 and prec.auto_override() is None:
            try:
                probe = self.probe() if self.probe is not None else None
                why_not = None if probe is not None else "no probe texts to check it on (model.encoder.probe is null)"
            except VtlabError as e:  # e.g. no BoolQ asset: no check, so no int8
                why_not = f"no probe texts to check it on ({e})"
        key = self._fingerprint(owner, len(probe[0])) if probe is not None else None
        reference: dict[str, sp.csr_matrix] = {}
        return prec.choose_auto(candidates, lambda p: self._probe_trial(owner, p, *probe, reference), key, why_not)

    def _probe_trial(
        self,
        owner: Encodes,
        precision: str,
        queries: Sequence[str],
        docs: Sequence[str],
        reference: dict[str, sp.csr_matrix],
    ) -> prec.Trial:
        """One precision on the probe: its vectors (vs the fp32 ones in `reference`, which the fp32 trial, run first,
        fills) and its passages/s, timed on a second pass over the same batches."""
        run, fwd = owner.encode_as, owner.pooled  # the networks as such, whatever the query side does
        # timed on one thread, in this thread's CPU seconds: other processes' load would otherwise decide, through
        # preemption and OpenMP threads spinning at barriers; the kernels are the same per core
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            # the untimed first pass gives the vectors compared and pays the one-time costs (the int8 copy, oneDNN's
            # kernels generated per matrix shape) that the timed pass must not
            d = run(precision, docs, "doc", 64, False, fwd)
            q = run(precision, queries, "query", 64, False, fwd)
            t = time.thread_time()
            run(precision, docs, "doc", 64, False, fwd)
            rate = len(docs) / max(time.thread_time() - t, 1e-9)
        finally:
            torch.set_num_threads(threads)
        if precision == "fp32":
            reference.update(queries=q, docs=d)
            return prec.Trial(precision, rate)
        return prec.Trial(precision, rate, prec.agreement(reference["queries"], reference["docs"], q, d))

    def _fingerprint(self, owner: Encodes, probe_size: int) -> str:
        """Cache key of auto's check: the weights and what shapes the vectors, and the machine it was timed on."""
        meta = {
            "class": type(owner).__name__,
            "max_length": owner.max_length,
            "double_log": owner.double_log,
            "tokens": len(owner.tokenizer),
            "torch": torch.__version__,
            "flags": sorted((prec.BF16_NATIVE_FLAGS | prec.INT8_NATIVE_FLAGS) & prec.cpu_flags()),
            "check": prec.CHECK_VERSION,
            "probe": probe_size,
        }

        def chunks() -> Iterator[Any]:
            yield json.dumps(meta, sort_keys=True).encode()
            for i, net in enumerate(owner.networks()):
                for name, t in net.state_dict().items():
                    yield f"{i}.{name}".encode()
                    yield t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()

        return stable_hash(chunks(), 24)
