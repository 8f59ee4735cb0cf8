"""The exported model card is ready for the Hugging Face Hub: YAML front matter (sentence-transformers' keys,
base_model / datasets when they are hub ids, model-index with the run's own metrics.json values), a title that names
the model, quality apart from timings, and no path of the machine that wrote it. export.push_to_hub offline is
refused in one line before anything is exported."""

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml
from helpers import compose_config, run_vtlab
from omegaconf import OmegaConf
from test_export_run import evaluated_run, write_beir

from vtlab.core.errors import VtlabError
from vtlab.evaluation import SPARSITY_KEYS, TIMING_KEYS
from vtlab.stages.pipeline import run, run_or_exit

pytestmark = pytest.mark.usefixtures("shared_cache")


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, str]:
    """(run dir, card text) of a real `stage=export run_dir=R` (vectors too) of a real run on a BEIR directory,
    R named as Hydra names run directories (<time>-<name>)."""
    tmp = tmp_path_factory.mktemp("card")
    run_dir = evaluated_run(
        tmp / "outputs" / "runs" / "2026-01-02" / "10-20-30-tinyfacts-run",
        write_beir(tmp / "data" / "tinyfacts", "tf"),
        "tinyfacts-run",
    )
    res = run_vtlab(
        "stage=export",
        f"run_dir={run_dir}",
        "export.vectors.formats=[anserini]",
        "export.vectors.queries=true",
        "logger=none",
        f"hydra.run.dir={tmp / 'outputs' / 'export'}",
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return run_dir, (run_dir / "sparse-encoder" / "README.md").read_text()


def front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n", 2)[1])


def recorded_metrics(run_dir: Path) -> dict[str, float]:
    return json.loads((run_dir / "eval" / "tinyfacts" / "metrics.json").read_text())["metrics"]


def section(card: str, start: str, end: str) -> str:
    return card.split(start, 1)[1].split(end, 1)[0]


@pytest.mark.cli
def test_card_holds_no_path_of_the_machine(exported, tmp_path_factory):
    run_dir, card = exported
    ancestors = {str(p) for p in run_dir.resolve().parents if p != Path(p.anchor)}
    ancestors |= {str(run_dir), str(run_dir.resolve()), str(tmp_path_factory.getbasetemp()), os.path.expanduser("~")}
    found = sorted(a for a in ancestors if len(a) > 1 and a in card)
    assert not found, f"the card names machine paths: {found}"
    # nor does any other text file of the directory a Hub upload would send (vtlab_export.json's source included)
    for path in (run_dir / "sparse-encoder").rglob("*"):
        if path.suffix in (".json", ".md", ".txt", ".yaml"):
            text = path.read_text()
            leaked = sorted(a for a in ancestors if len(a) > 1 and a in text)
            assert not leaked, f"{path.name} names machine paths: {leaked}"
    # the files of the same export, relative to the card, are there
    vectors = re.findall(r"`(\.\./vectors/[^`]+)`", card)
    assert vectors and all((run_dir / "sparse-encoder" / v).resolve().is_file() for v in vectors)
    assert "run_dir=<run dir>" in card and "eval.path=.../tinyfacts" in card  # commands: placeholders, not paths


@pytest.mark.cli
def test_card_lists_the_configs_export_formats(exported):
    """The formats the card names are the export.vectors nodes with a `_target_` (vtlab.export.vectors.format_names)."""
    assert (
        "Every engine format vtlab writes (`export.vectors.formats`): anserini, opensearch, elasticsearch, qdrant."
    ) in exported[1]


@pytest.mark.cli
def test_front_matter_has_the_hub_keys(exported):
    meta = front_matter(exported[1])
    assert meta["library_name"] == "sentence-transformers" and meta["pipeline_tag"] == "feature-extraction"
    assert {"sentence-transformers", "sparse-encoder", "splade", "vtlab", "splade-tiny", "native"} <= set(meta["tags"])
    assert "license" not in meta  # nothing claimed by default
    assert "base_model" not in meta and "datasets" not in meta  # an offline asset and a local BEIR directory
    assert meta["model-index"][0]["name"] == "tinyfacts-run"


@pytest.mark.cli
def test_model_index_holds_the_runs_metrics_json_values(exported):
    run_dir, card = exported
    recorded = recorded_metrics(run_dir)
    (result,) = front_matter(card)["model-index"][0]["results"]
    assert result["task"]["type"] == "sparse-information-retrieval" and result["dataset"]["name"] == "tinyfacts"
    values = {m["name"]: m["value"] for m in result["metrics"]}
    assert values == {k: v for k, v in recorded.items() if k not in TIMING_KEYS}
    assert {m["type"] for m in result["metrics"]} >= {"dot_ndcg@10", "dot_mrr@10", "dot_recall@100"}


@pytest.mark.cli
def test_timings_are_apart_from_the_quality_table(exported):
    run_dir, card = exported
    recorded = recorded_metrics(run_dir)
    quality = section(card, "## Evaluation", "### Timings")
    timings = section(card, "### Timings", "\n## ")
    rows = lambda text: {m for m in re.findall(r"^\| tinyfacts \| (\S+) \|", text, re.M)}  # noqa: E731
    assert rows(quality) == {k for k in recorded if k not in TIMING_KEYS}
    assert set(SPARSITY_KEYS) <= rows(quality) and rows(quality).isdisjoint(TIMING_KEYS)
    assert rows(timings) == {k for k in recorded if k in TIMING_KEYS} and rows(timings)


@pytest.mark.cli
@pytest.mark.train
def test_title_names_the_model_not_a_time(exported, tmp_path):
    run_dir, card = exported
    assert card.split("\n# ", 1)[1].splitlines()[0] == "tinyfacts-run"
    assert not re.search(r"^# .*\d{2}-\d{2}-\d{2}", card, re.M)
    cfg = compose_config(
        [
            "stage=export",
            f"run_dir={run_dir}",
            f"export.out={tmp_path / 'st'}",
            "export.name=my-splade",
            "export.license=apache-2.0",
            f"paths.run_dir={tmp_path / 'export'}",
        ]
    )
    run(cfg)
    named = (tmp_path / "st" / "README.md").read_text()
    meta = front_matter(named)
    assert named.split("\n# ", 1)[1].splitlines()[0] == "my-splade" and meta["model-index"][0]["name"] == "my-splade"
    assert meta["license"] == "apache-2.0"


def test_hub_ids_of_the_base_model_and_datasets(tmp_path):
    """A run on a hub backbone with hub data: base_model and datasets name them, the model-index dataset type is the
    BEIR hub id; a local BEIR directory or an offline asset never appears as one."""
    from vtlab.export.model_card import card_info, model_card
    from vtlab.export.run_config import RunConfig

    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(
        compose_config(
            [
                "backbone=modernbert",
                "vocab=native",
                "data=msmarco-st",
                "eval=hf-beir",
                "eval.name=scifact",
                "name=mb-splade",
            ]
        ),
        run_dir / ".hydra" / "config.yaml",
    )
    info = card_info(
        RunConfig(compose_config([]), run_dir),
        name=None,
        run_dir=run_dir,
        trained=True,
        license=None,
        repo_id="me/mb-splade",
    )
    metrics = {"scifact": {"nDCG@10": 0.5, "flops": 1.25, "total_s": 3.0}}
    card = model_card(
        info,
        {"kind": "siamese", "vocab_size": 50368, "max_length": {"query": 64, "doc": 256}},
        train_overrides=["backbone=modernbert"],
        export_overrides=None,
        metrics=metrics,
        vector_files={},
        vectors_of=None,
        onnx_dir=None,
        card_dir=run_dir / "st",
        run_dir=run_dir,
    )
    meta = front_matter(card)
    assert meta["base_model"] == "answerdotai/ModernBERT-base"
    assert meta["datasets"] == ["sentence-transformers/msmarco-hard-negatives", "mteb/msmarco", "BeIR/scifact"]
    (result,) = meta["model-index"][0]["results"]
    assert result["dataset"] == {"name": "scifact", "type": "BeIR/scifact"}
    assert [m["name"] for m in result["metrics"]] == ["nDCG@10", "flops"]
    assert 'SparseEncoder("me/mb-splade")' in card


@pytest.mark.train
def test_push_to_hub_offline_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    run_dir = tmp_path / "run"  # not even a model: the refusal comes first
    run_dir.mkdir()
    export = [
        "stage=export",
        f"run_dir={run_dir}",
        "export.push_to_hub=user/repo",
        "export.vectors.formats=[anserini]",
        f"paths.run_dir={tmp_path / 'export'}",
    ]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SystemExit) as ei:
        run_or_exit(compose_config(export))
    assert ei.value.code != 0
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(
        "vtlab: error: export.push_to_hub=user/repo: the Hugging Face Hub is not reachable (HF_HUB_OFFLINE=1); export "
        "without it and upload later with "
    ), err
    assert "upload user/repo " in err
    # nothing written: the empty run dir and the export's own (empty) run directory are all there is
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["export", "run"]

    # no offline flag, but no connection either
    import huggingface_hub.constants

    import vtlab.core.hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(vtlab.core.hub, "reachable", lambda: False)
    with pytest.raises(
        VtlabError,
        match=r"^export\.push_to_hub=user/repo: the Hugging Face Hub is not reachable "
        r"\(no connection to https?://",
    ):
        run(compose_config(export))
    assert not (run_dir / "sparse-encoder").exists() and not (run_dir / "vectors").exists()


def test_the_template_is_the_source_of_the_cards_text(tmp_path, monkeypatch):
    """The card is vtlab/export/templates/model_card.md filled in (string.Template): every placeholder-free line of the
    template is a line of the card, every placeholder has a field and is filled, and the template's text is what the
    card says (a line added to it shows in the card)."""
    from string import Template

    from vtlab.export import model_card as mc

    def card() -> str:
        info = mc.CardInfo(title="t", run="r", backbone="b", vocab="native", init="mean", train_datasets=("a/b",))
        return mc.model_card(
            info,
            {"kind": "inference-free", "vocab_size": 30522, "max_length": {"query": 32, "doc": 256}},
            train_overrides=["backbone=b"],
            export_overrides=["stage=export"],
            metrics={"c": {"nDCG@10": 0.5, "flops": 1.25, "total_s": 3.0}},
            vector_files={"anserini": tmp_path / "vectors" / "docs.jsonl"},
            vectors_of="c",
            onnx_dir="onnx",
            card_dir=tmp_path / "st",
            run_dir=tmp_path,
            formats=("anserini", "qdrant"),
        )

    template = mc.TEMPLATE.read_text()
    names = {m.group("named") or m.group("braced") for m in Template.pattern.finditer(template)}
    assert names and None not in names  # only $name / ${name}, no stray "$"
    text = card()
    lines = text.splitlines()
    fixed = [line for line in template.splitlines() if line.strip() and "$" not in line]
    assert "- **Similarity:** dot product" in fixed and [line for line in fixed if line not in lines] == []
    assert "$" not in text and not [n for n in names if f"{{{n}}}" in text]  # every placeholder filled
    assert "\n\n\n" not in text and text.endswith("```\n")  # sections present: no holes, the ONNX block last
    # the optional sections' text is theirs too (this card has all but the one for a run without an evaluation)
    sections = sorted(p for p in mc.TEMPLATES.glob("*.md") if p != mc.TEMPLATE)
    assert {p.stem for p in sections} == {"evaluation", "no_evaluation", "onnx", "timings", "vectors"}
    for path in sections:
        fixed = [line for line in path.read_text().splitlines() if line.strip() and "$" not in line]
        shown = [line for line in fixed if line in lines]
        assert shown == ([] if path.stem == "no_evaluation" else fixed), path.name
    assert mc.evaluation_section({}) == (mc.TEMPLATES / "no_evaluation.md").read_text().strip()

    edited = tmp_path / "templates"
    shutil.copytree(mc.TEMPLATES, edited)
    (edited / "model_card.md").write_text(
        template.replace("## Model details\n", "## Model details\n\nWritten from a template.\n")
    )
    onnx = (edited / "onnx.md").read_text()
    (edited / "onnx.md").write_text(onnx.replace("## ONNX\n", "## ONNX\n\nA section's own template.\n"))
    monkeypatch.setattr(mc, "TEMPLATES", edited)
    monkeypatch.setattr(mc, "TEMPLATE", edited / "model_card.md")
    text = card()
    assert "## Model details\n\nWritten from a template.\n\n- **Model type:**" in text
    assert "## ONNX\n\nA section's own template.\n\n`onnx/` holds" in text


@pytest.mark.parametrize(
    "text",
    [
        "- &a stage=train\n- *a\n",  # an alias: a run's record never holds one
        "- backbone=splade-tiny\n" * 200_000,  # past a record's size
    ],
)
def test_a_runs_overrides_are_read_bounded_and_named(tmp_path, text):
    from vtlab.export.model_card import run_overrides

    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text(text)
    with pytest.raises(VtlabError) as err:
        run_overrides(tmp_path)
    line = str(err.value)
    assert "\n" not in line and line.startswith(str(tmp_path / ".hydra" / "overrides.yaml"))
    assert line.endswith("expected the overrides.yaml a vtlab run writes")


def test_a_runs_overrides_are_returned_as_written(tmp_path):
    from vtlab.export.model_card import run_overrides

    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text("- backbone=splade-tiny\n- seed=3\n")
    assert run_overrides(tmp_path) == ["backbone=splade-tiny", "seed=3"]
    assert run_overrides(tmp_path / "absent") is None
