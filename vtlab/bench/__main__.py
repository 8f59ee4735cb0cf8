"""`make bench`: vtlab against its peers on the same model, data, batch and threads, in one run.

    python -m vtlab.bench [--quick] [--only encode,train,retrieval,transfer] [--n-docs 1000000] [--threads 2]

Every measurement runs in a fresh subprocess (peak RSS is per tool); vtlab and the peer of each row run back to back,
so the ratios compare the two under the same machine load. Writes outputs/bench/<part>/*.json, the vectors and
top-10 lists used for the equality / recall checks, and outputs/bench/summary.json; prints a table of absolute figures,
ratios and targets. Numbers are measured, never asserted: a target that is missed is reported with its shortfall.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from vtlab.bench.common import machine
from vtlab.bench.parts import SEISMIC, Log, encode_part, retrieval_part, train_part, transfer_part
from vtlab.bench.summary import summarize, table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="outputs/bench")
    ap.add_argument("--only", default="encode,train,retrieval,transfer")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-docs", type=int, default=1_000_000, help="synthetic collection size")
    ap.add_argument("--n-queries", type=int, default=1000)
    ap.add_argument("--docs", type=int, default=None, help="encode only the first N passages / questions")
    ap.add_argument("--models", default="splade-tiny,minilm", help="encode bench models (splade-tiny first)")
    ap.add_argument(
        "--minilm-docs", type=int, default=1000, help="MiniLM encodes the first N passages / questions (0: all)"
    )
    ap.add_argument(
        "--quick", action="store_true", help="a smoke run: SPLADE-tiny on 256 texts, 6 train steps, 20k synthetic docs"
    )
    args = ap.parse_args()
    if args.quick:
        args.docs = args.docs or 256
        args.n_docs = min(args.n_docs, 20_000)
        args.n_queries = min(args.n_queries, 200)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = Log()
    parts: dict[str, Any] = {}
    runners = {"encode": encode_part, "train": train_part, "retrieval": retrieval_part, "transfer": transfer_part}
    info = {
        "machine_start": machine(),
        "args": vars(args),
        "gpu": "not measured (no GPU in this environment)",
        "seismic": SEISMIC,
    }
    for name in args.only.split(","):
        if name not in runners:
            raise SystemExit(f"--only: unknown part {name!r} (choose from {', '.join(runners)})")
        began = time.perf_counter()
        parts[name] = runners[name](out, args, log)
        info[f"{name}_wall_s"] = round(time.perf_counter() - began, 1)
    info["machine_end"] = machine()
    info["total_wall_s"] = round(time.perf_counter() - log.t0, 1)
    summary = summarize(parts, args)
    (out / "details.json").write_text(json.dumps({"info": info, **parts}, indent=2, default=float) + "\n")
    (out / "summary.json").write_text(json.dumps({**summary, "info": info}, indent=2, default=float) + "\n")
    print(table(parts, summary, args))
    print(
        f"\nload average at start {info['machine_start']['loadavg_1_5_15']}, end "
        f"{info['machine_end']['loadavg_1_5_15']} on {info['machine_start'].get('cpus')} CPUs; GPU not measured; "
        f"CPU native bf16 (avx512_bf16/amx_bf16): {info['machine_start'].get('avx512_bf16')}/"
        f"{info['machine_start'].get('amx_bf16')}, precision=auto → {info['machine_start'].get('precision_auto')}; "
        f"total {info['total_wall_s']:.0f}s → {out / 'summary.json'}"
    )


if __name__ == "__main__":
    main()
