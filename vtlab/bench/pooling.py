"""SPLADE pooling's head alone — the vocabulary GEMM and the max over positions — per precision and kernel.

    python -m vtlab.bench.pooling [--texts 64] [--length 128] [--real 100] [--hidden 128] [--vocab 30522]
                                  [--threads 1,2] [--repeats 3] [--out FILE]

For fp32, bf16 and int8, each fused kernel this CPU runs (vtlab.runtime.fused) and the tiled GEMM without one: the best
of `repeats` timed calls on random hidden states (`real` of `length` positions per text unmasked), after a warm-up
call that also packs the weight. Prints one line per measurement (milliseconds and G multiply-adds per second) and the
CPU's flags; --out writes them as JSON. What `make bench` cannot show: how far each head is from its arithmetic peak.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from vtlab.bench.common import machine
from vtlab.runtime import fused, pooling
from vtlab.runtime.quantize import Int8Decoder


def best_ms(f: Callable[[], Any], repeats: int) -> float:
    f()  # warm-up: builds the kernel, packs the weight
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def heads(hidden: torch.Tensor, weight: torch.Tensor, mask: torch.Tensor) -> dict[str, Callable[[], Any]]:
    """precision → one call of the pooling's head as the encoder runs it in that precision."""
    decoder = torch.nn.Linear(weight.shape[1], weight.shape[0])
    decoder.weight.data = weight
    int8 = Int8Decoder(decoder)
    hb = hidden.bfloat16()
    return {
        "fp32": lambda: pooling.max_logits(hidden, weight, None, mask),
        "bf16": lambda: pooling.max_logits(hb, weight, None, mask),
        "int8": lambda: pooling.tiled_max_logits(hidden, int8, mask),
    }


def measure(
    precision: str, run: Callable[[], Any], kernel: fused.FusedKernel | None, threads: int, repeats: int
) -> float | None:
    """Best ms of `run` with `kernel` as the only fused kernel (None: the tiled GEMM) on `threads` threads; None when
    that kernel does not compute `precision` here."""
    every, before = fused.KERNELS, torch.get_num_threads()
    fused.KERNELS = (kernel,) if kernel is not None else ()
    try:
        if kernel is not None and fused.kernel_for(fused.DTYPES[precision]) is None:
            return None
        torch.set_num_threads(threads)
        return best_ms(run, repeats)
    finally:
        fused.KERNELS = every
        torch.set_num_threads(before)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--texts", type=int, default=64)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--real", type=int, default=100, help="unmasked positions per text")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if not 0 < args.real <= args.length:
        ap.error(f"--real {args.real}: expected 1..--length ({args.length})")
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(args.texts, args.length, args.hidden, generator=g)
    weight = torch.randn(args.vocab, args.hidden, generator=g) * 0.05
    mask = torch.zeros(args.texts, args.length, dtype=torch.bool)
    mask[:, : args.real] = True
    macs = args.texts * args.real * args.vocab * args.hidden
    info = machine()
    rows = []
    with torch.inference_mode():
        for precision, run in heads(hidden, weight, mask).items():
            for kernel in [k for k in fused.KERNELS if fused.open_kernel(k) is not None] + [None]:
                for threads in (int(t) for t in args.threads.split(",")):
                    ms = measure(precision, run, kernel, threads, args.repeats)
                    if ms is None:
                        break  # this kernel does not compute that precision here
                    name = kernel.name if kernel is not None else "tiled GEMM"
                    rows.append({"precision": precision, "kernel": name, "threads": threads, "ms": ms})
                    rate = macs / ms / 1e6
                    print(f"{precision:5s} {name:11s} {threads} thread(s): {ms:8.1f} ms  {rate:7.1f} GMAC/s")
    flags = ", ".join(k for k, v in info.items() if v is True and k not in ("gpu",))
    print(f"{args.texts} texts × {args.real} tokens × {args.vocab} × {args.hidden}; CPU flags: {flags}")
    if args.out is not None:
        record = {"args": vars(args) | {"out": str(args.out)}, "rows": rows, "info": info}
        args.out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
