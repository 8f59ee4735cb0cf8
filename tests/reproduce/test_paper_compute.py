"""Equal compute at paper scale: every row of the main table (conf/tables/paper.yaml) composed, VT's rows and the
rows compared with them at its compute (native, lowercase and lowercase-masked with MLM) get the same MLM adaptation
and the same APC, the authors' baselines as published get neither, the primary contrast pairs two equal-compute rows,
and the plan prices each row by the output rows its head really projects onto."""

import pytest
from helpers import compose_config
from omegaconf import OmegaConf

from vtlab import reproduce
from vtlab.reproduce import paper_plan

pytestmark = pytest.mark.slow

ROWS = reproduce.main_rows("paper")  # paper/main/<row>, in the table's order
# run_vt.sh, written out: MLM 20k steps of total batch 2048 (64 per device × 4 × 8 GPUs), then APC p60 over all
# (doc, term) max-logits of 20k probe documents at 512 tokens
VT_MLM_STEPS, VT_MLM_BATCH = 20000, 2048
VT_APC = {"percentile": 60.0, "include_zeros": True, "per_term": False, "shift": None, "num_docs": 20000}
EQUAL_COMPUTE = {  # the rows compared with VT at its compute: row → its vocabulary
    "modernbert-native-mlm": "native",
    "modernbert-lowercase-mlm": "blank-prefix-lower",
    "modernbert-lowercase-masked-mlm": "lowercase-masked",
}
PUBLISHED = {  # the authors' baselines as published: no MLM, no APC
    "bert-native",
    "modernbert-native",
    "modernbert-lowercase",
    "roberta-large-native",
    "bert-inference-free",
    "modernbert-inference-free",
}


def without_preprocess(model: dict) -> dict:
    """The model config less the encoder's input preprocessing (which the vocabulary sets)."""
    return {**model, "encoder": {k: v for k, v in model["encoder"].items() if k != "preprocess"}}


@pytest.fixture(scope="module")
def rows() -> dict[str, dict]:
    out = {}
    for row in ROWS:
        cfg = compose_config([f"experiment={row}", "paths.run_dir=/tmp/x"])
        out[row.rsplit("/", 1)[1]] = OmegaConf.to_container(cfg, resolve=True)
    return out


def test_every_main_row_is_vt_equal_compute_or_published(rows: dict[str, dict]):
    vt = {r for r in rows if "-vt" in r}
    assert vt == {"modernbert-vt", "roberta-large-vt", "modernbert-vt-inference-free"}
    assert set(rows) == vt | set(EQUAL_COMPUTE) | PUBLISHED


@pytest.mark.parametrize("row", sorted(EQUAL_COMPUTE))
def test_equal_compute_rows_get_vts_mlm_and_apc(rows: dict[str, dict], row: str):
    vt, cfg = rows["modernbert-vt"], rows[row]
    for r in (vt, cfg):
        assert r["mlm"]["steps"] == VT_MLM_STEPS
        assert r["mlm"]["batch_size"] * r["mlm"]["accumulate_grad_batches"] * r["trainer"]["devices"] == VT_MLM_BATCH
        assert {k: r["apc"][k] for k in VT_APC} == VT_APC and r["apc"]["max_length"] == 512
    assert cfg["mlm"] == vt["mlm"] and cfg["apc"] == vt["apc"]  # every setting, not only the ones named above
    # the same fine-tune too: only the vocabulary (its init, its input preprocessing) differs
    assert cfg["vocab"]["name"] == EQUAL_COMPUTE[row] and cfg["backbone"] == vt["backbone"]
    for key in ("trainer", "data", "loss", "regularizer", "eval"):
        assert cfg[key] == vt[key], key
    assert without_preprocess(cfg["model"]) == without_preprocess(vt["model"])


@pytest.mark.parametrize("row", sorted(PUBLISHED))
def test_published_baselines_get_neither(rows: dict[str, dict], row: str):
    assert rows[row]["mlm"]["steps"] == 0 and rows[row]["apc"]["percentile"] is None
    assert rows[row]["apc"]["shift"] is None


def test_vt_rows_share_one_adaptation(rows: dict[str, dict]):
    vt = rows["modernbert-vt"]
    for row in ("roberta-large-vt", "modernbert-vt-inference-free"):
        assert rows[row]["mlm"] == vt["mlm"] and rows[row]["apc"] == vt["apc"]


def test_primary_contrast_is_vt_against_the_equal_compute_masked_row(rows: dict[str, dict]):
    names = {cfg["name"] for cfg in rows.values()}
    reports = [cfg["report"] for cfg in rows.values()]
    assert all(r == reports[0] for r in reports)  # one declaration for the table (vtlab.report refuses several)
    report = reports[0]
    assert report["primary"] == ["paper-modernbert-vt", "paper-modernbert-lowercase-masked-mlm"]
    assert report["primary"] in report["contrasts"]
    assert all(a in names and b in names for a, b in report["contrasts"])
    by_name = {cfg["name"]: cfg for cfg in rows.values()}
    a, b = (by_name[n] for n in report["primary"])
    assert a["mlm"] == b["mlm"] and a["apc"] == b["apc"] and b["vocab"]["name"] == "lowercase-masked"


def test_plan_prices_the_masked_row_like_the_native_one():
    """The masked arm's head projects onto all of ModernBERT's 50,368 rows (a masked row is still computed)."""
    jobs = {j.experiment.rsplit("/", 1)[1]: j for j in paper_plan.plan({"main": [f"experiment={','.join(ROWS)}"]})}
    per_token = 6 * (111e6 + 768 * 50368)  # ModernBERT-base encoder + tied head, forward and backward
    flops = 150_000 * per_token * 128 * (32 + 2 * 192) + 20_000 * per_token * 2048 * 128
    for row in EQUAL_COMPUTE:
        assert jobs[row].gpu_hours == pytest.approx(flops / 100e12 / 3600)
        assert (jobs[row].mlm_steps, jobs[row].apc) == (20000, "p60")
    vt = 6 * (111e6 + 768 * 30522)  # VT: bert-base-uncased's 30,522 rows
    assert jobs["modernbert-vt"].gpu_hours == pytest.approx(
        (150_000 * vt * 128 * (32 + 2 * 192) + 20_000 * vt * 2048 * 128) / 100e12 / 3600
    )
    assert jobs["modernbert-lowercase"].mlm_steps == 0 and jobs["modernbert-lowercase"].apc == "off"
    text = paper_plan.render(list(jobs.values()))
    assert f"paper plan: {len(ROWS)} jobs" in text and "modernbert-lowercase-masked-mlm" in text
