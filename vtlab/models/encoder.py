"""The SPLADE encoder: any HF masked-LM → sparse vocabulary-sized vectors."""

from __future__ import annotations

import contextlib
import copy
import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from vtlab.backbones import Backbone, decoder_bypassed
from vtlab.backbones.pretrained import check_input_lengths
from vtlab.core.atomic import stable_hash
from vtlab.core.errors import VtlabError
from vtlab.core.logs import interactive
from vtlab.runtime import precision as prec
from vtlab.runtime.pooling import DEFAULT_CHUNK_BYTES, max_logits, splade_activation, tiled_max_logits
from vtlab.runtime.quantize import Int8Network, int8_unavailable, quantize_network, require_int8, weights_version

Side = Literal["query", "doc"]
Forward = Callable[[Tensor, Tensor, Side], Tensor]

# What encode() runs the forward pass under, per precision: bf16 autocast; int8 swaps in the networks' int8 copies.
RUNNERS: dict[str, Callable[[SpladeEncoder, str], AbstractContextManager[Any]]] = {
    "fp32": lambda encoder, device_type: contextlib.nullcontext(),
    "bf16": lambda encoder, device_type: torch.autocast(device_type, dtype=torch.bfloat16),
    "int8": lambda encoder, device_type: encoder.int8_networks(),
}
_CACHES = ("_int8_nets", "_int8_active", "_auto")  # per-process state: never copied, pickled or saved
# Inference runs the body in row chunks whose widest activation stays within this many bytes, below glibc's mmap
# threshold, so with vtlab.runtime.allocator's settings the same heap memory serves every batch instead of fresh pages
# from the kernel (SPLADE-tiny at 64 × 256 tokens: a 32 MiB FFN activation); the head then pools the whole batch (its
# weight streams from memory once per batch).
BODY_BYTES = 16 * 2**20


class SpladeEncoder(nn.Module):
    """w = log1p(relu(max over non-pad positions of MLM logits)), one network or separate query/doc networks."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer,
        query_model: nn.Module | None = None,
        query_max_length: int = 64,
        doc_max_length: int = 256,
        double_log: bool = False,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        preprocess: Callable[[str], str] | None = None,
        precision: str = "auto",
    ) -> None:
        super().__init__()
        prec.check_precision(precision)  # a bad value fails here, not at the first encode
        # a length past the model's positions fails here, not in the forward pass of the first text that long
        check_input_lengths(
            model, {"model.encoder.query_max_length": query_max_length, "model.encoder.doc_max_length": doc_max_length}
        )
        self.precision = precision  # of encode(): auto or native (vtlab.runtime.precision), fp32, bf16 or int8
        self._reset_caches()
        self.model = model
        self.query_model = query_model  # None → shared (siamese) encoder
        self.tokenizer = tokenizer
        self.max_length = {"query": query_max_length, "doc": doc_max_length}
        self.double_log = double_log
        self.chunk_bytes = chunk_bytes
        self.preprocess = preprocess
        # follow the loaded model (eval after from_pretrained), not nn.Module's default; int8 only ever encodes
        nn.Module.train(self, model.training and precision != "int8")

    def _reset_caches(self) -> None:
        self._int8_nets: dict[int, Int8Network] = {}  # id(fp32 network) → its int8 copy
        self._int8_active = False  # set by int8_networks(): max_logits runs the int8 copies
        self._auto: tuple[Any, prec.Choice] | None = None  # (what it was decided for, auto's choice)

    def __getstate__(self) -> dict[str, Any]:
        # packed int8 weights do not pickle or deepcopy; they are rebuilt on use (so is auto's choice)
        return {k: v for k, v in super().__getstate__().items() if k not in _CACHES}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._reset_caches()

    def train(self, mode: bool = True) -> SpladeEncoder:
        if mode and getattr(self, "precision", None) == "int8":
            raise VtlabError(
                "model.encoder.precision=int8 is for encoding only (int8 weights cannot be trained): "
                "train with auto, fp32 or bf16"
            )
        return super().train(mode)

    @classmethod
    def from_backbone(cls, backbone: Backbone, shared: bool = True, **kwargs) -> SpladeEncoder:
        model = backbone.load_model()
        query_model = None if shared else copy.deepcopy(model)
        return cls(model, backbone.load_tokenizer(), query_model=query_model, **kwargs)

    def replace_networks(self, model: nn.Module, tokenizer) -> None:
        """Swap in a network on another vocabulary (vocabulary transfer); a separate query network follows it."""
        self.model = model
        if self.query_model is not None:
            self.query_model = copy.deepcopy(model)
        self.tokenizer = tokenizer

    def save_pretrained(self, path: str | Path) -> Path:
        """The network and tokenizer as a Hugging Face directory (a separate query network under `query/`)."""
        path = Path(path)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        if self.query_model is not None:
            self.query_model.save_pretrained(path / "query")
        return path

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    def network(self, side: Side) -> nn.Module:
        return self.query_model if (side == "query" and self.query_model is not None) else self.model

    def forward(self, input_ids: Tensor, attention_mask: Tensor, side: Side = "doc") -> Tensor:
        return splade_activation(self.max_logits(input_ids, attention_mask, side), self.double_log)

    def max_logits(self, input_ids: Tensor, attention_mask: Tensor, side: Side = "doc") -> Tensor:
        """Raw per-term max over non-pad positions of the MLM logits, [B, V] (before relu/log): what APC calibrates.
        Inside int8_networks(): computed by the network's int8 copy."""
        net = self.network(side)
        if self._int8_active:
            q = self._int8_network(net)
            with decoder_bypassed(q.net), q.body():
                hidden = head_inputs(q.net, input_ids, attention_mask)
            return tiled_max_logits(hidden.float(), q.decoder, attention_mask, self.chunk_bytes)
        with decoder_bypassed(net) as decoder:
            hidden = head_inputs(net, input_ids, attention_mask)
        return max_logits(hidden, decoder.weight, decoder.bias, attention_mask, self.chunk_bytes)

    # ---- precision ---------------------------------------------------------------------------------------------------
    def _int8_network(self, net: nn.Module) -> Int8Network:
        """The int8 copy of `net`, made on first use and again after its weights change (training, APC, loading)."""
        q = self._int8_nets.get(id(net))
        if q is None or q.version != weights_version(net):
            q = self._int8_nets[id(net)] = quantize_network(net)
        return q

    @contextlib.contextmanager
    def int8_networks(self) -> Iterator[None]:
        """Forward passes inside run the networks' int8 copies (the fp32 networks are left as they are)."""
        require_int8()
        if self.training:
            raise VtlabError("model.encoder.precision=int8 is for encoding only: the encoder is in training mode")
        before, self._int8_active = self._int8_active, True
        try:
            yield
        finally:
            self._int8_active = before

    def resolved_precision(self, device: str | torch.device = "cpu") -> str:
        """The precision encode() runs: `self.precision`, or auto's choice for this model (prec.choose_auto: the int8
        check runs once per weights, cached on disk; one log line says which and why)."""
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
        decided_for = (candidates, *(weights_version(net) for net in self._networks()))
        if self._auto is None or self._auto[0] != decided_for:
            why_not = int8_unavailable() if "int8" in candidates else None
            probe = None
            if "int8" in candidates and why_not is None and len(candidates) > 1:
                try:
                    probe = prec.probe_texts()
                except VtlabError as e:  # no BoolQ asset: no check, so no int8
                    why_not = f"no probe texts to check it on ({e})"
            key = self._fingerprint() if probe is not None else None
            reference: dict[str, sp.csr_matrix] = {}
            choice = prec.choose_auto(candidates, lambda p: self._probe_trial(p, *probe, reference), key, why_not)
            self._auto = (decided_for, choice)
        return self._auto[1].precision

    def auto_choice(self, device: str | torch.device = "cpu") -> prec.Choice:
        """What precision=auto runs for this model on `device`, and why (its check runs now if it has not; only for an
        encoder whose precision is `auto`)."""
        if self.precision != "auto":
            raise ValueError(f"auto_choice: this encoder's precision is {self.precision!r}, not 'auto'")
        self.resolved_precision(device)
        return self._auto[1]

    def _networks(self) -> list[nn.Module]:
        """The networks precision applies to (not e.g. an inference-free IDF table: auto's check does not see it)."""
        return [self.model] + ([self.query_model] if self.query_model is not None else [])

    def computing(self, device: str | torch.device = "cpu") -> AbstractContextManager[Any]:
        """The context forward passes run under for the resolved precision, for callers that run the encoder outside
        encode() (e.g. a Lightning predict step): `with encoder.computing(device): w = encoder(ids, mask, side)`."""
        device = torch.device(device)
        return RUNNERS[self.resolved_precision(device)](self, device.type)

    def _probe_trial(
        self, precision: str, queries: Sequence[str], docs: Sequence[str], reference: dict[str, sp.csr_matrix]
    ) -> prec.Trial:
        """One precision on the probe: its vectors (vs the fp32 ones in `reference`, which the fp32 trial, run first,
        fills) and its passages/s, timed on a second pass over the same batches."""
        run = self._encode_as

        # the networks as such, whatever a subclass does on the query side (inference-free: no network there)
        def fwd(ids: Tensor, mask: Tensor, side: Side) -> Tensor:
            return splade_activation(self.max_logits(ids, mask, side), self.double_log)

        # Timed on one thread, in this thread's CPU seconds: other processes' load (a shared machine, a parallel test
        # run) would otherwise decide, through preemption and OpenMP threads spinning at barriers. On a 2-core machine
        # at load 13, 500 passages took fp32 28-34 CPU s and int8 20-38 CPU s on 2 threads (wall: 100-205 s and
        # 84-222 s), and 4.1-4.3 s and 2.4-2.6 s on one thread. The kernels are the same per core.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            # untimed first pass: its vectors are the ones compared; it also pays the one-time costs the timed pass
            # must not (the int8 copy; oneDNN's kernels are generated per matrix shape, i.e. per batch here: on a
            # first pass bf16 measured 176 passages/s, on later ones 251)
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

    def _fingerprint(self) -> str:
        """Cache key of auto's check: the weights and what shapes the vectors, and the machine it was timed on."""
        meta = {
            "class": type(self).__name__,
            "max_length": self.max_length,
            "double_log": self.double_log,
            "tokens": len(self.tokenizer),
            "torch": torch.__version__,
            "flags": sorted((prec.BF16_NATIVE_FLAGS | prec.INT8_NATIVE_FLAGS) & prec.cpu_flags()),
            "check": prec.CHECK_VERSION,
            "probe": prec.PROBE_PAIRS,
        }

        def chunks() -> Iterator[Any]:
            yield json.dumps(meta, sort_keys=True).encode()
            for i, net in enumerate(self._networks()):
                for name, t in net.state_dict().items():
                    yield f"{i}.{name}".encode()
                    yield t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()

        return stable_hash(chunks(), 24)

    def output_bias(self, side: Side = "doc") -> Tensor:
        """The MLM decoder bias of the network used for `side` (APC shifts it)."""
        return self.network(side).get_output_embeddings().bias

    def tokenize(self, texts: Sequence[str], side: Side) -> dict[str, Tensor]:
        if self.preprocess is not None:
            texts = [self.preprocess(t) for t in texts]
        return self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_length[side], return_tensors="pt"
        )

    def batches(
        self, texts: Sequence[str], side: Side, batch_size: int = 64
    ) -> Iterator[tuple[np.ndarray, Tensor, Tensor]]:
        """(positions in `texts`, input_ids, attention_mask) batches, longest texts first.

        Every text is tokenized once, in one call of the (Rust, multi-threaded) fast tokenizer, and batches are padded
        from those ids: sorting by token length cuts padding from ~30% to ~2% on BoolQ.
        """
        texts = [self.preprocess(t) for t in texts] if self.preprocess is not None else list(texts)
        if not texts:
            return
        ids = self.tokenizer(
            texts,
            truncation=True,
            max_length=self.max_length[side],
            return_attention_mask=False,
            return_token_type_ids=False,
        )["input_ids"]
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        order = np.argsort(-lengths, kind="stable")
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        left = getattr(self.tokenizer, "padding_side", "right") == "left"
        for start in range(0, len(texts), batch_size):
            idx = order[start : start + batch_size]
            width = int(lengths[idx[0]])  # the longest of this batch comes first
            input_ids = np.full((len(idx), width), pad_id, dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                n = int(lengths[i])
                cols = slice(width - n, width) if left else slice(0, n)
                input_ids[row, cols] = ids[i]
                mask[row, cols] = 1
            yield idx, torch.from_numpy(input_ids), torch.from_numpy(mask)

    @torch.inference_mode()
    def encode(
        self, texts: Sequence[str], side: Side = "doc", batch_size: int = 64, show_progress: bool = True
    ) -> sp.csr_matrix:
        """Encode texts into a CSR matrix [len(texts), vocab_size], float32, in input order (batches: `batches`).

        Computed in `self.precision` (auto: `resolved_precision`)."""
        device = next(self.parameters()).device
        return self._encode_as(self.resolved_precision(device), texts, side, batch_size, show_progress, self)

    @torch.inference_mode()
    def _encode_as(
        self, precision: str, texts: Sequence[str], side: Side, batch_size: int, show_progress: bool, forward: Forward
    ) -> sp.csr_matrix:
        was_training = self.training
        self.eval()
        device = next(self.parameters()).device
        rows: list[sp.csr_matrix] = []
        positions: list[np.ndarray] = []
        bar = tqdm(
            total=len(texts),
            desc="encode queries" if side == "query" else "encode docs",
            unit=side,
            disable=not (show_progress and interactive()),
            leave=False,
        )  # no \r frames in a log file
        try:
            for idx, input_ids, mask in self.batches(texts, side, batch_size):
                with RUNNERS[precision](self, device.type):
                    w = forward(input_ids.to(device), mask.to(device), side)
                rows.append(dense_to_csr(w))
                positions.append(idx)
                bar.update(len(idx))
        finally:
            bar.close()
            self.train(was_training)
        if not rows:
            return sp.csr_matrix((0, self.vocab_size), dtype=np.float32)
        stacked = sp.vstack(rows, format="csr")
        order = np.concatenate(positions)
        inverse = np.empty_like(order)
        inverse[order] = np.arange(len(order))
        return stacked[inverse]


def body_rows(config: Any, length: int, budget_bytes: int) -> int:
    """How many rows of `length` positions one forward pass of the body takes so that its widest fp32 activation (the
    FFN's, or the attention scores where they are materialized) stays within `budget_bytes` (at least one)."""
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    widest = max(
        int(getattr(config, "intermediate_size", 0) or 4 * hidden),
        hidden,
        int(getattr(config, "num_attention_heads", 1) or 1) * length,
    )
    return max(1, budget_bytes // (length * widest * 4))


def head_inputs(net: nn.Module, input_ids: Tensor, attention_mask: Tensor, budget_bytes: int | None = None) -> Tensor:
    """The hidden states the (bypassed) MLM decoder would read, [B, L, H]. On CPU without autograd the body runs in row
    chunks of `body_rows` (budget: BODY_BYTES); with autograd (its activations are kept for the backward anyway) or on
    an accelerator (no glibc heap there, and smaller kernels would only be slower) in one pass. Rows are independent
    in the body; an int8 body quantizes each chunk's activations on their own range."""
    B, L = input_ids.shape
    one_pass = torch.is_grad_enabled() or input_ids.device.type != "cpu"
    step = B if one_pass else body_rows(getattr(net, "config", None), L, budget_bytes or BODY_BYTES)
    if step >= B:
        return net(input_ids=input_ids, attention_mask=attention_mask).logits
    return torch.cat(
        [
            net(input_ids=input_ids[i : i + step], attention_mask=attention_mask[i : i + step]).logits
            for i in range(0, B, step)
        ]
    )


def dense_to_csr(w: Tensor) -> sp.csr_matrix:
    """A [B, V] tensor of term weights → float32 CSR, keeping only the non-zeros."""
    w = w.detach().float().cpu()
    b, v = torch.nonzero(w, as_tuple=True)
    vals = w[b, v].numpy()
    indptr = np.zeros(w.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(b.numpy(), minlength=w.shape[0]), out=indptr[1:])
    return sp.csr_matrix((vals, v.numpy().astype(np.int32), indptr), shape=tuple(w.shape))
