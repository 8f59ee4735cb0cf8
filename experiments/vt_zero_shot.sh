#!/usr/bin/env bash
# Zero-shot vocabulary transfer of the trained SPLADE-tiny, evaluated on BoolQ (offline). Produces the two tables in
# README.md ("Results"). Usage: bash experiments/vt_zero_shot.sh [OUT_DIR]   (~15 min on 2 CPU cores)
set -euo pipefail
OUT=${1:-outputs/experiments/vt-zero-shot}
PY=${PY:-.venv/bin/python}
mkdir -p "$OUT"
ev() { local name=$1; shift; [ -f "$OUT/$name/eval/boolq/metrics.json" ] && return 0
       $PY -m vtlab stage=evaluate eval=boolq logger=none name="$name" hydra.run.dir="$OUT/$name" "$@" > "$OUT/$name.log" 2>&1; }

# Table 1: bert-uncased SPLADE-tiny → a 20k WordPiece trained on BoolQ passages (no target model: bias follows init)
ev original backbone=splade-tiny
for init in subword mean new-random all-random; do
  ev "wp20k-$init" backbone=splade-tiny vocab=corpus-wordpiece vocab.vocab_size=20000 init=$init
done

# Table 2: SPLADE-tiny → ModernBERT's OLMo BPE (FVT/subword), then back to bert-uncased with each init
[ -e "$OUT/to-bpe/transfer" ] || $PY -m vtlab stage=transfer backbone=splade-tiny vocab=modernbert-bpe init=subword \
    logger=none hydra.run.dir="$OUT/to-bpe" > "$OUT/to-bpe.log" 2>&1
BPE=$(readlink -f "$OUT/to-bpe/transfer")
ev bpe backbone=splade-tiny backbone.name_or_path="$BPE"
for init in semantic semantic-pmi semantic-zscore subword mean new-random all-random; do
  ev "back-$init" backbone=splade-tiny backbone.name_or_path="$BPE" vocab=bert-uncased init=$init
done

$PY - "$OUT" <<'PYEOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def row(name):
    m = json.loads((out / name / "eval/boolq/metrics.json").read_text())["metrics"]
    return f"| {name} | {m['nDCG@10']:.4f} | {m['RR@10']:.4f} | {m['R@100']:.4f} | {m['query_active_dims']:.1f} | {m['doc_active_dims']:.1f} |"
head = "| run | nDCG@10 | RR@10 | R@100 | q dims | d dims |\n|---|---|---|---|---|---|"
print(head); [print(row(n)) for n in ["original", *[f"wp20k-{i}" for i in ("subword", "mean", "new-random", "all-random")]]]
print(); print(head)
[print(row(n)) for n in ["original", "bpe", *[f"back-{i}" for i in ("semantic", "semantic-pmi", "semantic-zscore", "subword", "mean", "new-random", "all-random")]]]
PYEOF
