"""Peak memory of one SPLADE training step, uncached and with the cached loss at several mini-batch sizes.

    python -m vtlab.bench.cached_memory [--batch 32 --mini-batches 0,32,16,8,4 --layers 4 --hidden 256]

Each setting runs in a fresh process (0: the uncached step): a random-init BERT MLM (bert-base-uncased's 30,522-term
vocabulary, `--layers` × `--hidden`), `--batch` queries × (1 positive + `--negatives`) documents of random tokens at
`--query-length` / `--doc-length`, dropout on, fp32 on the CPU, InfoNCE with in-batch negatives + FLOPS on both sides,
forward and backward (no optimizer: its state is the same in every setting). The peak resident set of the step is
measured above the resident set just before it (the loaded model), with the peak counter reset before the step
(/proc/self/clear_refs), and printed as one JSON line per setting.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
import time

import torch
from transformers import BertConfig, BertForMaskedLM

from vtlab.bench.common import peak_rss_mb, rss_mb, set_threads
from vtlab.losses import InfoNCE
from vtlab.models.encoder import SpladeEncoder
from vtlab.models.splade import SpladeModule
from vtlab.regularizers import Flops


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current resident set
        return True
    except OSError:
        return False


def worker(args: argparse.Namespace) -> dict[str, float | int | None]:
    set_threads(args.threads)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=max(1, args.hidden // 64),
        intermediate_size=4 * args.hidden,
        max_position_embeddings=max(args.query_length, args.doc_length),
    )
    lengths = {"query_max_length": args.query_length, "doc_max_length": args.doc_length}
    encoder = SpladeEncoder(BertForMaskedLM(config), None, precision="fp32", **lengths)
    mini_batch = args.mini_batch or None
    module = SpladeModule(
        encoder, InfoNCE(), functools.partial(torch.optim.AdamW), Flops(1e-3), Flops(1e-3), cached_mini_batch=mini_batch
    )
    module.train()

    def side(n: int, length: int) -> dict[str, torch.Tensor]:
        return {"input_ids": torch.randint(1000, 30000, (n, length)), "attention_mask": torch.ones(n, length).long()}

    docs = args.batch * (1 + args.negatives)
    batch = {"query": side(args.batch, args.query_length), "docs": side(docs, args.doc_length)}
    before = rss_mb()
    reset = _reset_peak()
    start = time.perf_counter()
    module.training_step(batch, 0).backward()
    seconds = time.perf_counter() - start
    params = sum(p.numel() for p in module.parameters())
    return {
        "mini_batch": mini_batch,
        "batch": args.batch,
        "parameters": params,
        "model_mb": round(before, 1),
        "step_peak_mb": round(peak_rss_mb() - before, 1) if reset else None,
        "step_s": round(seconds, 2),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--negatives", type=int, default=1)
    p.add_argument("--query-length", type=int, default=32)
    p.add_argument("--doc-length", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mini-batches", default="0,32,16,8,4", help="comma-separated; 0: the uncached step")
    p.add_argument("--mini-batch", type=int, default=None, help=argparse.SUPPRESS)  # a worker's one setting
    args = p.parse_args(argv)
    if args.mini_batch is not None:
        print(json.dumps(worker(args)))
        return
    shape = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k not in ("mini_batches", "mini_batch")]
    for n in args.mini_batches.split(","):
        cmd = [sys.executable, "-m", "vtlab.bench.cached_memory", *shape, f"--mini-batch={int(n)}"]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        print(out.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
