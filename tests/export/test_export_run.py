"""`stage=export run_dir=R` exports R's own collection: a run evaluated on a BEIR directory exports that directory's
documents and queries (not the export command's default eval, a BoolQ set), says so in one line, and only an
explicit command line (`eval=...`, `eval.KEY=...`, `export.vectors.corpus=...`) changes that. R's eval node is data:
its targets are checked before anything in it is instantiated, and an evaluation suite needs a member picked."""

import json
from pathlib import Path

import pytest
from helpers import compose_config, run_vtlab
from omegaconf import OmegaConf

from vtlab.backbones import Backbone
from vtlab.core.errors import VtlabError
from vtlab.stages.pipeline import run

pytestmark = pytest.mark.usefixtures("shared_cache")

TOPICS = ["volcano", "glacier", "comet", "orchid", "falcon", "harbor", "violin", "cactus", "lantern", "meteor"]


def write_beir(root: Path, prefix: str, n_docs: int = 30, n_queries: int = 10) -> Path:
    """A BEIR directory of generated text: `n_docs` documents `<prefix>-d<i>`, `n_queries` queries `<prefix>-q<j>`,
    query j judging document j."""
    (root / "qrels").mkdir(parents=True)
    with open(root / "corpus.jsonl", "w") as f:
        for i in range(n_docs):
            t = TOPICS[i % len(TOPICS)]
            f.write(
                json.dumps(
                    {
                        "_id": f"{prefix}-d{i}",
                        "title": f"{t} note {i}",
                        "text": f"The {t} of passage {i} is described here with other {t}s.",
                    }
                )
                + "\n"
            )
    with open(root / "queries.jsonl", "w") as f:
        for j in range(n_queries):
            f.write(json.dumps({"_id": f"{prefix}-q{j}", "text": f"what is a {TOPICS[j % len(TOPICS)]}?"}) + "\n")
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{prefix}-q{j}\t{prefix}-d{j}\t1\n" for j in range(n_queries))
    )
    return root


def evaluated_run(run_dir: Path, beir: Path, name: str) -> Path:
    """A real run directory on a BEIR set: `stage=evaluate ... eval=beir eval.path=<beir>` recorded by Hydra
    (.hydra/config.yaml, overrides.yaml, eval/<set>/metrics.json), plus the SPLADE-tiny it evaluated saved as its
    model/ (what a training run leaves; training itself is not what these tests are about)."""
    res = run_vtlab(
        "stage=evaluate",
        "backbone=splade-tiny",
        "vocab=native",
        "apc=off",
        "baseline=false",
        "logger=none",
        "eval=beir",
        f"eval.path={beir}",
        f"name={name}",
        f"hydra.run.dir={run_dir}",
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    backbone = Backbone("asset:splade-tiny")
    backbone.load_model().save_pretrained(run_dir / "model")
    backbone.load_tokenizer().save_pretrained(run_dir / "model")
    return run_dir


def doc_ids(vectors: Path) -> list[str]:
    return [json.loads(line)["id"] for line in (vectors / "anserini" / "docs.jsonl").read_text().splitlines()]


def query_ids(vectors: Path) -> list[str]:
    return [line.split("\t", 1)[0] for line in (vectors / "anserini" / "queries.tsv").read_text().splitlines()]


@pytest.fixture(scope="module")
def beir_run(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("export-run")
    beir = write_beir(tmp / "tinyfacts", "tf")
    return evaluated_run(tmp / "runs" / "12-00-00-tinyfacts-run", beir, "tinyfacts-run"), beir


def export_in_process(out: Path, run_dir: Path, *overrides: str) -> dict:
    """`stage=export run_dir=...` in this process, its command line recorded where Hydra records it
    (<paths.run_dir>/.hydra/overrides.yaml) so the export sees what was given explicitly."""
    command = [
        "stage=export",
        f"run_dir={run_dir}",
        "export.sentence_transformers=false",
        "export.vectors.formats=[anserini]",
        "export.vectors.queries=true",
        f"export.vectors.dir={out / 'vectors'}",
        *overrides,
    ]
    (out / "export" / ".hydra").mkdir(parents=True)
    (out / "export" / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in command))
    return run(compose_config([*command, f"paths.run_dir={out / 'export'}"]))


@pytest.mark.cli
def test_export_of_a_beir_run_encodes_that_collection_and_says_so(beir_run):
    """The export command's own eval (its default: thousands of BoolQ passages) is not what the run was evaluated
    on: the vectors are the BEIR directory's 30 documents and 10 queries, and one line names them and whose config
    said so."""
    run_dir, _ = beir_run
    res = run_vtlab(
        "stage=export",
        f"run_dir={run_dir}",
        "export.vectors.formats=[anserini]",
        "export.vectors.queries=true",
        "logger=none",
        f"hydra.run.dir={run_dir.parent / 'export'}",
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    vectors = run_dir / "vectors"
    assert doc_ids(vectors) == [f"tf-d{i}" for i in range(30)]
    assert query_ids(vectors) == [f"tf-q{j}" for j in range(10)]
    line = f"export: encoding tinyfacts from {run_dir}/.hydra/config.yaml (eval): 30 documents, 10 queries"
    assert line in res.stdout.splitlines(), res.stdout
    card = (run_dir / "sparse-encoder" / "README.md").read_text()
    assert "vectors of tinyfacts" in card and "`../vectors/anserini/docs.jsonl`" in card


@pytest.mark.cli
@pytest.mark.train
def test_only_the_command_line_replaces_the_runs_collection(beir_run, tmp_path, capsys):
    """`+eval.path=OTHER` changes R's eval (still R's beir loader, not the command's default eval; `+` because that
    default has no `path` key); `eval=boolq ...` replaces it with the command's own;
    `export.vectors.corpus=FILE` takes the documents from FILE only."""
    run_dir, _ = beir_run
    other = write_beir(tmp_path / "otherfacts", "of", n_docs=12, n_queries=4)
    export_in_process(tmp_path / "path", run_dir, f"+eval.path={other}")
    assert doc_ids(tmp_path / "path" / "vectors") == [f"of-d{i}" for i in range(12)]
    assert query_ids(tmp_path / "path" / "vectors") == [f"of-q{j}" for j in range(4)]
    assert (
        f"export: encoding otherfacts from {run_dir}/.hydra/config.yaml (eval, with eval.path from the command "
        "line): 12 documents, 4 queries"
    ) in capsys.readouterr().out.splitlines()

    export_in_process(
        tmp_path / "boolq", run_dir, "eval=boolq", "+eval.collection.max_docs=20", "+eval.collection.max_queries=5"
    )
    ids = doc_ids(tmp_path / "boolq" / "vectors")
    assert len(ids) == 20 and not any(i.startswith("tf-") for i in ids)
    assert "export: encoding boolq from this command's eval: 20 documents, 5 queries" in capsys.readouterr().out

    export_in_process(tmp_path / "file", run_dir, f"export.vectors.corpus={other / 'corpus.jsonl'}")
    assert doc_ids(tmp_path / "file" / "vectors") == [f"of-d{i}" for i in range(12)]
    assert query_ids(tmp_path / "file" / "vectors") == [f"tf-q{j}" for j in range(10)]  # queries: still R's


def _recorded_run(tmp_path: Path, eval_node: dict) -> Path:
    """A run directory whose recorded config has `eval_node` as its eval (and a placeholder model/)."""
    run_dir = tmp_path / "run"
    (run_dir / "model").mkdir(parents=True)
    (run_dir / "model" / "config.json").write_text("{}")
    (run_dir / ".hydra").mkdir()
    cfg = OmegaConf.to_container(compose_config(["backbone=splade-tiny", "vocab=native"]))
    cfg["eval"] = eval_node
    (run_dir / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    return run_dir


def _beir_eval(path: Path, name: str) -> dict:
    return {
        "_target_": "vtlab.evaluation.RetrievalEvaluation",
        "name": name,
        "path": str(path),
        "collection": {"_target_": "vtlab.data.collections.load_beir", "split": "test", "_partial_": True},
    }


@pytest.mark.train
def test_an_eval_suite_in_the_run_is_refused_in_one_line_or_picked_by_name(tmp_path):
    suite = {
        "_target_": "vtlab.eval_suite.EvaluationSuite",
        "name": "two",
        "evaluations": {
            "alpha": _beir_eval(write_beir(tmp_path / "alpha", "a", 6, 2), "alpha"),
            "beta": _beir_eval(write_beir(tmp_path / "beta", "b", 8, 3), "beta"),
        },
    }
    run_dir = _recorded_run(tmp_path, suite)
    export = [
        "stage=export",
        f"run_dir={run_dir}",
        "export.vectors.formats=[anserini]",
        "export.vectors.queries=true",
        f"paths.run_dir={tmp_path / 'export'}",
    ]
    with pytest.raises(VtlabError) as ei:
        run(compose_config(export))
    msg = str(ei.value)
    assert "\n" not in msg and f"{run_dir}/.hydra/config.yaml (eval) is an evaluation suite (alpha, beta)" in msg
    assert "export.vectors.collection=<name>" in msg and "export.vectors.corpus=<corpus.jsonl>" in msg
    assert not (run_dir / "vectors").exists() and not (run_dir / "sparse-encoder").exists()  # refused before work

    # the untrained placeholder model/ is never loaded: vectors only, from a stand-in SPLADE-tiny model/
    backbone = Backbone("asset:splade-tiny")
    backbone.load_model().save_pretrained(run_dir / "model")
    backbone.load_tokenizer().save_pretrained(run_dir / "model")
    run(compose_config([*export, "export.vectors.collection=beta", "export.sentence_transformers=false"]))
    assert doc_ids(run_dir / "vectors") == [f"b-d{i}" for i in range(8)]
    assert query_ids(run_dir / "vectors") == [f"b-q{j}" for j in range(3)]


@pytest.mark.train
@pytest.mark.parametrize("where", ["eval", "interpolated"])
def test_foreign_targets_in_the_runs_eval_are_never_instantiated(tmp_path, where):
    """R's eval node is data like its model.encoder: a `_target_` outside vtlab (directly, or reached through an
    interpolation) is refused in one line naming the file, and the code never runs."""
    marker = tmp_path / "ran"
    evil = {"_target_": "builtins.open", "_args_": [str(marker), "w"]}
    node = evil if where == "eval" else {**_beir_eval(tmp_path, "x"), "collection": "${oops}"}
    run_dir = _recorded_run(tmp_path, node)
    if where == "interpolated":
        text = (run_dir / ".hydra" / "config.yaml").read_text() + OmegaConf.to_yaml({"oops": evil})
        (run_dir / ".hydra" / "config.yaml").write_text(text)
    cfg = compose_config(
        [
            "stage=export",
            f"run_dir={run_dir}",
            "export.vectors.formats=[anserini]",
            f"paths.run_dir={tmp_path / 'export'}",
        ]
    )
    with pytest.raises(VtlabError) as ei:
        run(cfg)
    resolved = "" if where == "eval" else ", resolved"
    key = "" if where == "eval" else "collection."
    assert str(ei.value).startswith(
        f"{run_dir}/.hydra/config.yaml (eval{resolved}): {key}_target_='builtins.open' is not instantiated"
    ), str(ei.value)
    assert not marker.exists()


def test_encoder_settings_are_the_runs_unless_the_command_line_sets_one(tmp_path):
    """R's model.encoder is read as R recorded it; `model.encoder.KEY=...` on the export command changes that key
    only (the rest, e.g. R's lengths, stays R's), and the origin says so."""
    from vtlab.export.run_config import RunConfig

    run_dir = _recorded_run(tmp_path, _beir_eval(tmp_path, "x"))
    recorded = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    OmegaConf.update(recorded, "model.encoder.query_max_length", 17)
    OmegaConf.save(recorded, run_dir / ".hydra" / "config.yaml")
    command = compose_config(["stage=export", f"run_dir={run_dir}", "model.encoder.precision=fp32"])
    node, origin = RunConfig(command, run_dir).node("model.encoder")
    assert (node.precision, node.query_max_length, origin) == (
        "auto",
        17,
        f"{run_dir}/.hydra/config.yaml (model.encoder)",
    )
    node, origin = RunConfig(command, run_dir, ["model.encoder.precision=fp32"]).node("model.encoder")
    assert (node.precision, node.query_max_length) == ("fp32", 17)
    assert origin == f"{run_dir}/.hydra/config.yaml (model.encoder, with model.encoder.precision from the command line)"
