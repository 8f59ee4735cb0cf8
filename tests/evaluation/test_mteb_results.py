"""stage=evaluate writes each evaluation's scores in MTEB's results format too: the files have the structure mteb writes
(checked here from the format, and by mteb's own classes: mteb is a dev dependency), with metrics.json's values."""

import json
from pathlib import Path

import pytest
import torch
from helpers import CONF, compose_config, need_module
from hydra.utils import instantiate
from omegaconf import OmegaConf

from vtlab.evaluation.mteb_results import model_revision, mteb_scores, write_mteb_results
from vtlab.stages.evaluate import run as evaluate

# the MTEB task of each BEIR-13 set (mteb/tasks/retrieval/eng/*.py: TaskMetadata.name)
BEIR_TASKS = {
    "trec-covid": "TRECCOVID",
    "nfcorpus": "NFCorpus",
    "nq": "NQ",
    "hotpotqa": "HotpotQA",
    "fiqa": "FiQA2018",
    "arguana": "ArguAna",
    "webis-touche2020": "Touche2020",
    "dbpedia-entity": "DBPedia",
    "scidocs": "SCIDOCS",
    "fever": "FEVER",
    "climate-fever": "ClimateFEVER",
    "scifact": "SciFact",
    "quora": "QuoraRetrieval",
}
# TaskResult's fields as mteb (>= 1.11) writes them, and what each score entry must hold
TOP_LEVEL = {"dataset_revision": str, "task_name": str, "mteb_version": (str, type(None)), "scores": dict}
OPTIONAL = {"evaluation_time": (float, int, type(None)), "kg_co2_emissions": (float, type(None))}


def check_task_result(data: dict, split: str) -> dict:
    """The structure check written from mteb's format; returns the split's one score entry."""
    for key, kind in {**TOP_LEVEL, **OPTIONAL}.items():
        assert key in data and isinstance(data[key], kind), key
    assert list(data["scores"]) == [split]
    (entry,) = data["scores"][split]
    assert entry["hf_subset"] == "default" and isinstance(entry["languages"], list) and entry["languages"]
    assert all(isinstance(lang, str) and len(lang.split("-")) == 2 for lang in entry["languages"])  # eng-Latn
    assert isinstance(entry["main_score"], float)
    for key, value in entry.items():
        if key not in ("hf_subset", "languages"):
            assert isinstance(value, float), key
    return entry


def write_beir(root: Path) -> None:
    corpus = {"d1": "the river bank", "d2": "money in the bank", "d3": "a green tree", "d4": "old city court"}
    queries = {"q1": "river bank", "q2": "green tree", "q3": "court of the city"}
    qrels = {"q1": {"d1": 1}, "q2": {"d3": 1}, "q3": {"d4": 1, "d2": 1}}
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in corpus.items()))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in queries.items()))
    rows = "".join(f"{q}\t{d}\t{r}\n" for q, rel in qrels.items() for d, r in rel.items())
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    root = tmp_path_factory.mktemp("mteb")
    write_beir(root / "toy")
    run_dir = root / "run"
    overrides = [
        "stage=evaluate",
        "model=bm25",
        "vocab=native",
        "logger=none",
        "eval=beir",
        f"eval.path={root / 'toy'}",
    ]
    cfg = compose_config([*overrides, "eval.measures=[nDCG@10,RR@10,R@100,AP@10,P@5]", f"paths.run_dir={run_dir}"])
    evaluate(cfg, {})
    return run_dir, cfg


def test_evaluation_writes_mteb_files_with_metrics_json_scores(evaluated):
    run_dir, cfg = evaluated
    metrics = json.loads((run_dir / "eval" / "toy" / "metrics.json").read_text())["metrics"]
    folder = revision_folder(run_dir, cfg)
    assert sorted(p.name for p in folder.iterdir()) == ["model_meta.json", "toy.json"]
    data = json.loads((folder / "toy.json").read_text())
    entry = check_task_result(data, "test")
    assert data["task_name"] == "toy" and data["vtlab"]["mteb_task"] is False  # not an MTEB task: its own name
    want = {  # metrics.json's values, under MTEB's names (hand-written map)
        "ndcg_at_10": metrics["nDCG@10"],
        "mrr_at_10": metrics["RR@10"],
        "recall_at_100": metrics["R@100"],
        "map_at_10": metrics["AP@10"],
        "precision_at_5": metrics["P@5"],
    }
    assert {k: v for k, v in entry.items() if k not in ("hf_subset", "languages", "main_score")} == want
    assert entry["main_score"] == metrics["nDCG@10"] and 0 < entry["main_score"] <= 1
    assert data["evaluation_time"] == metrics["total_s"]
    meta = json.loads((folder / "model_meta.json").read_text())
    assert meta["name"] == f"vtlab/{cfg.name}" and meta["revision"] == folder.name
    assert meta["model_type"] == ["sparse"] and meta["similarity_fn_name"] == "dot"


def test_mtebs_own_classes_read_them_and_write_the_same(evaluated):
    """mteb's TaskResult and ModelMeta load the files as written, and what they would write for them is the same
    (TaskResult: less vtlab's own block; its date as a datetime, and the evaluation phases it adds, empty)."""
    mteb = need_module("mteb")
    from mteb.models.model_meta import ModelMeta
    from mteb.results.task_result import TaskResult

    run_dir, cfg = evaluated
    folder = revision_folder(run_dir, cfg)
    result = TaskResult.from_disk(folder / "toy.json")
    metrics = json.loads((run_dir / "eval" / "toy" / "metrics.json").read_text())["metrics"]
    assert result.get_score() == pytest.approx(metrics["nDCG@10"])
    assert result.scores["test"][0]["recall_at_100"] == metrics["R@100"]
    data = json.loads((folder / "toy.json").read_text())
    theirs = result.to_dict()
    assert theirs.pop("date").timestamp() == pytest.approx(data.pop("date"))
    assert theirs.pop("evaluation_phases") is None
    assert theirs == {k: v for k, v in data.items() if k != "vtlab"}
    meta = json.loads((folder / "model_meta.json").read_text())
    loaded = ModelMeta.model_validate(dict(meta))  # (its validation pops a key from the dict it is given)
    assert loaded.model_name_as_path() == f"vtlab__{cfg.name}"
    assert loaded.to_dict() == meta
    assert mteb.__name__ == "mteb"


def test_beir13_names_the_mteb_task_of_each_set(tmp_path):
    suite = instantiate(OmegaConf.load(CONF / "eval" / "beir13.yaml"))  # lazy: no collection is loaded
    assert {name: ev.mteb_task for name, ev in suite.items()} == BEIR_TASKS
    ev = suite.evaluations["scifact"]
    assert ev.split == "test" and ev.languages == ["eng-Latn"]
    metrics = {"nDCG@10": 0.5, "RR@10": 0.25, "R@100": 0.75, "nDCG@10@q16-d64": 0.4, "flops": 1.0, "total_s": 2.0}
    path = write_mteb_results(tmp_path, ev, "scifact", metrics, "vtlab/m", "r1")
    assert path == tmp_path / "vtlab__m" / "r1" / "SciFact.json"
    data = json.loads(path.read_text())
    entry = check_task_result(data, "test")
    assert data["task_name"] == "SciFact" and data["vtlab"]["mteb_task"] is True
    assert entry == {
        "main_score": 0.5,
        "ndcg_at_10": 0.5,
        "mrr_at_10": 0.25,
        "recall_at_100": 0.75,
        "hf_subset": "default",
        "languages": ["eng-Latn"],
    }


def test_score_names():
    assert mteb_scores({"nDCG@1000": 1, "R@5": 0.5, "Judged@10": 1, "flops": 3}) == {
        "ndcg_at_1000": 1.0,
        "recall_at_5": 0.5,
    }


@pytest.mark.slow
@pytest.mark.usefixtures("shared_cache")
def revision_folder(run_dir: Path, cfg) -> Path:
    """The one revision folder of the run's model under eval/mteb/: named after the model (BM25 here: its settings),
    never after the run directory."""
    (folder,) = (run_dir / "eval" / "mteb" / f"vtlab__{cfg.name}").iterdir()
    assert folder.name == model_revision(instantiate(cfg.model.encoder)) != run_dir.name
    return folder


class _Networks:
    """An encoder as model_revision sees it: its networks."""

    def __init__(self, seed: int) -> None:
        torch.manual_seed(seed)
        self.net = torch.nn.Linear(4, 3)

    def networks(self) -> list:
        return [self.net]


def test_the_revision_is_the_models_weights_not_where_they_were_evaluated():
    same, other = _Networks(0), _Networks(1)
    assert model_revision(same) == model_revision(_Networks(0)) != model_revision(other)
    with torch.no_grad():
        same.net.bias[0] += 1e-3
    assert model_revision(same) != model_revision(_Networks(0))
    assert len(model_revision(other)) == 12


def test_the_quickstarts_evaluation_writes_mteb_files(tmp_path):
    """The quickstart's evaluation (make demo's eval: BoolQ-clean, 2,109 passages) through stage=evaluate: its MTEB
    file passes the format's check and holds metrics.json's nDCG@10. BM25 stands in for the trained model: the files'
    form is what is checked, not the model."""
    run_dir = tmp_path / "run"
    cfg = compose_config(["stage=evaluate", "model=bm25", "vocab=native", "logger=none", f"paths.run_dir={run_dir}"])
    assert cfg.eval.name == compose_config([]).eval.name == "boolq-clean"
    evaluate(cfg, {})
    metrics = json.loads((run_dir / "eval" / "boolq-clean" / "metrics.json").read_text())["metrics"]
    folder = revision_folder(run_dir, cfg)
    (task,) = [p for p in folder.iterdir() if p.name != "model_meta.json"]
    data = json.loads(task.read_text())
    entry = check_task_result(data, next(iter(data["scores"])))
    assert entry["main_score"] == entry["ndcg_at_10"] == metrics["nDCG@10"] and 0 < entry["main_score"] <= 1
