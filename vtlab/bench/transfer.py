"""Full-size vocabulary transfer benchmark: ModernBERT-base shapes (50,368 → 30,522 rows × 768), real tokenizers.

Weights are random (no ModernBERT/BERT-base weights exist offline) but every tensor has the real shape, so time and
memory are what a real transfer costs. Usage: python -m vtlab.bench.transfer [--similarity pmi] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, ModernBertConfig, ModernBertForMaskedLM

from vtlab.backbones import TinyModernBert
from vtlab.bench.common import peak_rss_mb
from vtlab.core.assets import asset_path
from vtlab.vocab.init import Semantic
from vtlab.vocab.transfer import TransferOptions, apply_transfer


def peak_rss_gb() -> float:
    """This process's own high-water mark (see vtlab.bench.common.peak_rss_mb)."""
    return peak_rss_mb() / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--similarity", default="pmi", choices=["cosine", "pmi", "zscore"])
    ap.add_argument("--out", default="outputs/bench/transfer.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    source_tok = TinyModernBert().load_tokenizer()  # the real OLMo/ModernBERT BPE, 50,368 ids
    target_tok = AutoTokenizer.from_pretrained(str(asset_path("minilm")))  # exact bert-base-uncased vocab
    t0 = time.perf_counter()
    cfg = ModernBertConfig(
        vocab_size=len(source_tok),
        pad_token_id=source_tok.pad_token_id,
        cls_token_id=source_tok.cls_token_id,
        sep_token_id=source_tok.sep_token_id,
        bos_token_id=source_tok.cls_token_id,
        eos_token_id=source_tok.sep_token_id,
    )
    model = ModernBertForMaskedLM(cfg)  # ModernBERT-base: 22 layers, 768 hidden
    build_s = time.perf_counter() - t0
    rss_model = peak_rss_gb()
    target_emb = torch.randn(len(target_tok), 768) * 0.05  # bert-base-uncased-shaped target embeddings
    target_bias = torch.randn(len(target_tok)) * 0.5
    t1 = time.perf_counter()
    report = apply_transfer(
        model, source_tok, target_tok, Semantic(similarity=args.similarity), target_emb, target_bias, TransferOptions()
    )
    transfer_s = time.perf_counter() - t1
    result = {
        "similarity": args.similarity,
        "threads": torch.get_num_threads(),
        "source_rows": len(source_tok),
        "target_rows": len(target_tok),
        "hidden": 768,
        "overlap": report["overlap"],
        "init": report["init"],
        "model_build_s": round(build_s, 2),
        "transfer_s": round(transfer_s, 2),
        "peak_rss_gb_after_model": round(rss_model, 2),
        "peak_rss_gb": round(peak_rss_gb(), 2),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
