"""Paper scale behaves as the authors' code (docs/paper-scale.md). Every test re-computes the
authors' formula written out here (from their trainer.py, loss.py, dataset.py and probe script) or counts a
brute-force sample, and each would fail on vtlab's earlier behaviour (global FLOPS mean, first positive only, dev
selection on BoolQ, local in-batch losses, other positives as InfoNCE negatives, APC p60 with zeros)."""

import gzip
import json
import os
import pickle
import socket
from collections import Counter

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from helpers import compose_config
from hydra.utils import instantiate
from omegaconf import OmegaConf
from scipy.stats import chisquare

from vtlab import reproduce
from vtlab.core.errors import ConfigError
from vtlab.data import hf
from vtlab.data.datamodule import TripletDataset
from vtlab.losses import InfoNCE, KLDivergence, MarginMSE
from vtlab.regularizers import Flops
from vtlab.reproduce import paper_plan

RUN_DIR = "paths.run_dir=/tmp/x"  # composed only, never run


def paper(row="bert-native", *extra):
    return compose_config([RUN_DIR, f"experiment=paper/main/{row}", *extra])


def sparse_reps(rows, vocab, seed, density=0.3):
    g = torch.Generator().manual_seed(seed)
    w = torch.rand(rows, vocab, generator=g) * (torch.rand(rows, vocab, generator=g) < density)
    return w


# ---- 1. FLOPS normalization: the authors' flops_value (trainer.py), written out ----------------------------------


def authors_flops(representation, group_num=1, flops_threshold=None):
    representation = representation.reshape(-1, group_num, representation.shape[-1])
    if flops_threshold is None:
        return torch.sum(torch.mean(torch.abs(representation), dim=0) ** 2)
    w_j_per_doc = torch.abs(representation)
    doc_length = torch.norm(w_j_per_doc, p=0, dim=2)
    mask = (doc_length > flops_threshold).float()
    mask = mask.unsqueeze(2).repeat(1, 1, w_j_per_doc.shape[2])
    return torch.sum(torch.mean(mask * w_j_per_doc, dim=0) ** 2)


@pytest.mark.parametrize("row", ["bert-native", "modernbert-vt-inference-free"])
def test_paper_doc_flops_is_the_authors_per_group_value(row):
    cfg = paper(row)
    reg = instantiate(cfg.regularizer.doc)
    group = 1 + cfg.data.num_negatives
    # 6 queries × (positive, negative) over 400 terms; densities around the l0 threshold (150 active terms)
    d = torch.cat([sparse_reps(2, 400, s, density=0.25 + 0.05 * s) for s in range(6)])
    value = reg(d, step=10**6, group_size=group)[1]
    expected = authors_flops(d, group, flops_threshold=150)
    assert value.item() == pytest.approx(expected.item(), rel=1e-6)
    # vtlab's global mean is another number (the authors' value is larger when positions look alike)
    old = Flops(1.0, threshold=150)(d, step=0, group_size=group)[1]
    assert old.item() != pytest.approx(expected.item(), rel=1e-3)


def test_flops_normalize_option_and_global_default_unchanged():
    d = sparse_reps(12, 50, 0)
    assert Flops(1.0, normalize="per_group").penalty(d, 3).item() == pytest.approx(authors_flops(d, 3).item())
    # global: Σ_v (mean over all rows)², as before; quickstart and testbed rows keep it
    assert Flops(1.0).penalty(d, 3).item() == pytest.approx(((d.mean(0)) ** 2).sum().item())
    for overrides in ([], ["experiment=testbed/main/wp-native"]):
        assert compose_config([RUN_DIR, *overrides]).regularizer.doc.normalize == "global"
    with pytest.raises(ConfigError, match="regularizer normalize"):
        Flops(1.0, normalize="per-query")


# ---- 2. MS MARCO data: MsMarcoScoresFromSentenceTransformers.__getitem__, counted ---------------------------------

QRELS = {1: [10, 11], 2: [20], 3: [30], 4: [40]}
CE = {
    1: {10: 5.0, 11: 4.0, 12: 1.0, 13: 0.5, 14: -1.0},
    2: {20: 3.0, 21: 0.2, 22: 0.1, 99: 0.0},
    3: {31: 1.0, 32: 0.5},
    4: {40: 2.0},
}  # 99: no text; 3: positive not scored; 4: nothing to sample against
QUERIES = {str(q): f"query {q}" for q in QRELS}
TEXTS = {str(p): f"passage {p}" for q in CE for p in CE[q] if p != 99}


def _pid(text):
    return int(text.split()[-1])


def authors_pair_probabilities(qid):
    """P(positive, negative) of their __getitem__: random.sample(qrels) then a uniform other CE-scored passage."""
    pos = [p for p in QRELS[qid] if p in CE[qid]]
    pool = [p for p in CE[qid] if str(p) in TEXTS]
    return {(p, n): 1 / len(pos) / (len(pool) - 1) for p in pos for n in pool if n != p}


def test_msmarco_draws_follow_the_authors_sampler():
    examples = hf.ce_pool_examples(QRELS, CE, QUERIES, TEXTS, num_negatives=1)
    assert [ex.query for ex in examples] == ["query 1", "query 2"]  # 3 and 4 have nothing to draw
    ds = TripletDataset(examples, num_negatives=1, seed=0)
    epochs = 4000
    for i, ex in enumerate(examples):
        qid = int(ex.query_id)
        counts = Counter()
        for epoch in range(epochs):
            _, docs, scores = ds[(i, epoch)]
            pos, neg = map(_pid, docs)
            assert scores == [CE[qid][pos], CE[qid][neg]]  # both CE scores, aligned
            counts[(pos, neg)] += 1
        expected = authors_pair_probabilities(qid)
        assert set(counts) <= set(expected)
        observed = [counts[k] for k in expected]
        assert chisquare(observed, [epochs * p for p in expected.values()]).pvalue > 1e-3, counts
    # per (seed, epoch, example): reproducible, and a new draw every epoch
    assert ds[(0, 7)] == ds[(0, 7)] and len({tuple(ds[(0, e)][1]) for e in range(20)}) > 1


def test_msmarco_source_reads_every_query_without_a_cap(tmp_path, monkeypatch):
    scores = tmp_path / "ce.pkl.gz"
    with gzip.open(scores, "wb") as f:
        pickle.dump(CE, f)
    tables = {
        ("default", "train"): [
            {"query-id": str(q), "corpus-id": str(p), "score": 1} for q, ps in QRELS.items() for p in ps
        ],
        ("queries", "queries"): [{"_id": q, "text": t} for q, t in QUERIES.items()],
        ("corpus", "corpus"): [{"_id": p, "title": "", "text": t} for p, t in TEXTS.items()],
    }
    monkeypatch.setattr(hf, "_hub_file", lambda repo, name: str(scores))
    monkeypatch.setattr(hf, "_hf_dataset", lambda repo, config, split: tables[(config, split)])
    examples = hf.st_msmarco_ce_pool(num_negatives=1)
    assert [(ex.query_id, ex.positive_id, sorted(ex.negative_ids)) for ex in examples] == [
        ("1", "10", ["11", "12", "13", "14"]),
        ("2", "20", ["21", "22"]),
    ]
    assert examples[0].other_positives == [examples[0].negative_ids.index("11")]
    cfg = paper("bert-native")
    assert cfg.data.train._target_ == "vtlab.data.hf.st_msmarco_ce_pool" and cfg.data.train.max_examples is None


# ---- 3. checkpoint selection: none (the authors evaluate the last step) --------------------------------------------


def test_paper_runs_are_not_selected_on_a_dev_set():
    cfg = paper("modernbert-vt")
    assert cfg.data.dev is None and cfg.trainer.limit_val_batches == 0
    dm = instantiate(cfg.data, train=None)
    assert dm.val_dataloader() == []  # nothing to select on: the fine-tune ends on its last step's weights
    assert "boolq" not in json.dumps(OmegaConf.to_container(cfg.data, resolve=True))


# ---- 4. global batch: two processes compute what one process computes on the whole batch -------------------------


def authors_margin_mse(q, d, t):
    s = torch.bmm(d.reshape(q.shape[0], -1, d.shape[-1]), q.reshape(q.shape[0], -1, 1)).squeeze(-1)
    margin = lambda x: x[:, 0].reshape(-1, 1).expand(x.shape[0], x.shape[1] - 1) - x[:, 1:]  # noqa: E731
    return torch.nn.MSELoss()(margin(s), margin(t))


def authors_infonce(q_rep, d_rep, use_in_batch_negatives=True):
    bs = q_rep.shape[0]
    indices = torch.arange(0, d_rep.shape[0], step=d_rep.shape[0] // bs)
    scores_pos = torch.matmul(q_rep, d_rep[indices].t()).diag().unsqueeze(-1)
    mask = torch.ones(d_rep.shape[0], dtype=torch.bool)
    mask[indices] = False
    neg_rep = d_rep[mask]
    if use_in_batch_negatives:
        scores_neg = torch.matmul(q_rep, neg_rep.t())
    else:
        scores_neg = torch.bmm(neg_rep.reshape(bs, -1, neg_rep.shape[-1]), q_rep.reshape(bs, -1, 1)).reshape(bs, -1)
    scores = torch.cat([scores_pos, scores_neg], dim=1)
    target = torch.zeros(scores.shape)
    target[:, 0] = 1
    return torch.nn.CrossEntropyLoss()(scores, target)


B, GROUP, HIDDEN, VOCAB = 8, 2, 6, 16


def _batch():
    g = torch.Generator().manual_seed(3)
    xq, xd = torch.randn(B, HIDDEN, generator=g), torch.randn(B * GROUP, HIDDEN, generator=g)
    teacher = torch.randn(B, GROUP, generator=g)
    weight = torch.randn(HIDDEN, VOCAB, generator=g)
    return xq, xd, teacher, weight


def _vtlab_step(kind, xq, xd, teacher, weight):
    """vtlab's training objective (SpladeModule.training_step's parts) and its gradient on a shared parameter."""
    w = weight.clone().requires_grad_(True)
    q, d = torch.relu(xq @ w), torch.relu(xd @ w)
    loss = {"margin": MarginMSE(), "infonce": InfoNCE(in_batch_positives=False)}[kind](q, d, teacher)
    total = loss + Flops(0.5, normalize="per_group")(d, step=0, group_size=GROUP)[0] + Flops(0.25)(q, step=0)[0]
    total.backward()
    return total.detach(), w.grad


def _authors_step(kind, xq, xd, teacher, weight):
    w = weight.clone().requires_grad_(True)
    q, d = torch.relu(xq @ w), torch.relu(xd @ w)
    loss = authors_margin_mse(q, d, teacher) if kind == "margin" else authors_infonce(q, d)
    total = loss + 0.5 * authors_flops(d, GROUP) + 0.25 * authors_flops(q)
    total.backward()
    return total.detach(), w.grad


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank, world, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    xq, xd, teacher, weight = _batch()
    shard = slice(rank * B // world, (rank + 1) * B // world)  # whole queries with their groups, as Lightning shards
    rows = slice(shard.start * GROUP, shard.stop * GROUP)
    for kind in ("margin", "infonce"):
        value, grad = _vtlab_step(kind, xq[shard], xd[rows], teacher[shard], weight)
        dist.all_reduce(grad)  # DDP: gradients averaged over ranks
        out[(rank, kind)] = (value, grad / world)
    dist.destroy_process_group()


@pytest.mark.cli
def test_two_processes_equal_one_process_and_the_authors_global_batch():
    xq, xd, teacher, weight = _batch()
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_worker, args=(2, _free_port(), out), nprocs=2, join=True)
        results = dict(out)
    for kind in ("margin", "infonce"):
        ref_value, ref_grad = _authors_step(kind, xq, xd, teacher, weight)
        one_value, one_grad = _vtlab_step(kind, xq, xd, teacher, weight)
        assert torch.allclose(one_value, ref_value, atol=1e-5) and torch.allclose(one_grad, ref_grad, atol=1e-5)
        for rank in (0, 1):
            value, grad = results[(rank, kind)]
            assert torch.allclose(value, ref_value, atol=1e-5), kind
            assert torch.allclose(grad, ref_grad, atol=1e-5), kind
    # without gathering each process would see half the batch: another value (the invariance is not trivial)
    half = InfoNCE(in_batch_positives=False)(torch.relu(xq[:4] @ weight), torch.relu(xd[:8] @ weight))
    assert not torch.allclose(half, authors_infonce(torch.relu(xq @ weight), torch.relu(xd @ weight)), atol=1e-3)


def test_paper_global_batch_is_explicit_and_checked():
    cfg = paper("bert-native")
    assert (cfg.paper.gpus, cfg.paper.global_batch, cfg.data.batch_size, cfg.trainer.devices) == (8, 128, 16, 8)
    assert paper_plan.check_global_batch(cfg, "x") == 128
    assert paper("bert-inference-free").paper.global_batch == 160  # c_doc.yaml: 20 per device
    four = paper("bert-native", "paper.gpus=4")  # same global batch on 4 GPUs: the per-device batch is derived
    assert four.data.batch_size == 32 and paper_plan.check_global_batch(four, "x") == 128
    with pytest.raises(ConfigError, match=r"data.batch_size=16 × trainer.devices=4 .* paper.global_batch=128"):
        paper_plan.check_global_batch(paper("bert-native", "trainer.devices=4", "data.batch_size=16"), "x")


# ---- 5. InfoNCE: other queries' positives excluded (loss.py) or included (sentence-transformers MNRL) -------------


def test_infonce_switch_matches_both_forms():
    g = torch.Generator().manual_seed(0)
    q, d = torch.rand(4, 9, generator=g), torch.rand(4 * 3, 9, generator=g)
    assert InfoNCE(in_batch_positives=False)(q, d).item() == pytest.approx(authors_infonce(q, d).item(), rel=1e-6)
    mnrl = F.cross_entropy(q @ d.t(), torch.arange(4) * 3)  # every document of the batch competes
    assert InfoNCE(in_batch_positives=True)(q, d).item() == pytest.approx(mnrl.item(), rel=1e-6)
    assert InfoNCE(in_batch_negatives=False)(q, d).item() == pytest.approx(
        authors_infonce(q, d, use_in_batch_negatives=False).item(), rel=1e-6
    )
    assert abs(mnrl.item() - authors_infonce(q, d).item()) > 1e-3
    assert instantiate(paper("bert-native", "loss=infonce").loss).in_batch_positives is False
    assert instantiate(compose_config([RUN_DIR]).loss).in_batch_positives is True  # quickstart keeps MNRL's form


def test_kl_div_gathers_and_is_unchanged_on_one_process():
    g = torch.Generator().manual_seed(1)
    q, d, t = torch.rand(3, 5, generator=g), torch.rand(6, 5, generator=g), torch.rand(3, 2, generator=g)
    s = torch.bmm(d.reshape(3, 2, 5), q.reshape(3, 5, 1)).squeeze(-1)
    authors = torch.nn.KLDivLoss(reduction="none")(torch.log_softmax(s, 1), torch.softmax(t, 1)).sum(1).mean(0)
    assert KLDivergence()(q, d, t).item() == pytest.approx(authors.item(), rel=1e-6)


# ---- 6. MLM-length ablation: APC p60 without zeros (run_ft.sh) -----------------------------------------------------


class _FixedLogits(torch.nn.Module):
    """An 'encoder' whose max-logits per document are given rows of Z (APC.probe's interface)."""

    def __init__(self, z):
        super().__init__()
        self.z, self.w = z, torch.nn.Parameter(torch.zeros(1))
        self.max_length = {"doc": 8}

    def tokenize(self, texts, side):
        ids = torch.tensor([[int(t)] for t in texts])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def max_logits(self, input_ids, attention_mask, side):
        return self.z[input_ids[:, 0]]


def test_mlm_ablation_calibrates_p60_on_positive_values_only():
    cfg = compose_config([RUN_DIR, "experiment=paper/ablation-mlm"])
    apc = instantiate(cfg.apc)
    z = torch.randn(40, 30, generator=torch.Generator().manual_seed(0)) + 0.3
    texts = [str(i) for i in range(40)]
    cut = apc.cutoff(apc.probe(_FixedLogits(z), texts)["samples"])
    # probe_activation_percentiles.py without --include_zeros: percentile over the positive max-logits only
    assert cut == pytest.approx(float(np.percentile(z[z > 0].numpy(), 60)), rel=1e-5)
    main = instantiate(paper("modernbert-vt").apc)  # run_vt.sh: with zeros
    assert main.cutoff(main.probe(_FixedLogits(z), texts)["samples"]) == pytest.approx(
        float(np.percentile(z.numpy(), 60)), rel=1e-5
    )


# ---- the plan printed before submitting ---------------------------------------------------------------------------


@pytest.mark.slow
def test_plan_counts_jobs_and_estimates_gpu_hours():
    sweeps = {
        "main": ["experiment=paper/main/bert-native,paper/main/roberta-large-vt", "seed=0,1"],
        **reproduce.sweeps("paper", 3, ["ablation-mlm"]),
    }
    jobs = paper_plan.plan(sweeps)
    assert sum(j.seeds for j in jobs) == 2 * 2 + 3 * 9
    bert = next(j for j in jobs if j.experiment == "paper/main/bert-native")
    # 150k steps × 6 × (encoder + tied 30,522-row head) × 128 queries × (32 + 2 × 192 tokens) at 100 TFLOP/s
    flops = 150_000 * 6 * (86e6 + 768 * 30522) * 128 * (32 + 2 * 192)
    assert bert.gpu_hours == pytest.approx(flops / 100e12 / 3600)
    mlm = [j for j in jobs if j.table == "ablation-mlm"]
    assert [j.mlm_steps for j in mlm] == [0, 500, 1000, 2000, 3000, 5000, 10000, 15000, 20000]
    assert paper_plan.launcher_overrides(jobs) == ["hydra.launcher.tasks_per_node=8", "hydra.launcher.gpus_per_node=8"]


def test_reproduce_prints_the_plan_before_the_commands(capsys):
    assert reproduce.main(["--scale", "paper", "--tables", "ablation-apc", "--seeds", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.index("paper plan: 8 jobs") < out.index("+ ") and "GPU-hours" in out
    assert "hydra.launcher.tasks_per_node=8" in out


# ---- make gpu-smoke: its CPU shape runs the whole script (the GPU run is the same code at ModernBERT-base shape) -----


@pytest.mark.train
def test_gpu_smoke_tiny_runs_the_vt_pipeline(tmp_path):
    from vtlab.bench import gpu_smoke

    # answerdotai/ModernBERT-base's config.json
    assert gpu_smoke.SHAPES["base"] == dict(
        hidden_size=768, num_hidden_layers=22, num_attention_heads=12, intermediate_size=1152
    )
    out = tmp_path / "smoke.json"
    assert gpu_smoke.main(["--tiny", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["shape"]["vocab_size"] == 30522  # transferred to bert-base-uncased's vocabulary before training
    assert r["steps"] == 3 and r["profiled_steps"] == 1 and r["step_time_s_median"] > 0
    assert 0 < r["tokens_per_s"] <= r["padded_tokens_per_s"]
    assert 0 < r["head_gemm_share_of_step"] < r["head_share_of_step"] < 1
    assert r["peak_gpu_mem_gib"] is None and r["device"] == "cpu"
