"""A researcher's own data, end to end, exactly as README.md's "Use your own data" says: the commands are read from
the README (so the section cannot drift from what works) and run as subprocesses on a generated BEIR-format set whose
test passages appear in no training role. Only speed settings are appended (fewer steps, shorter texts) plus fp32,
so the exported vectors can be compared with the run's own evaluation on every CPU.

Checked: results are filed under the test directory's own name (not eval/eval), the vocabulary is a WordPiece trained on
the user's texts, the dev set given as data.dev_path chose the checkpoint, export encodes the run's collection (not
BoolQ), and Qdrant's top-10 for every exported query equals the run's own ranking (run.trec).
"""

from __future__ import annotations

import json
import random
import re
import shlex
from pathlib import Path

import pytest
import qdrant_client  # a dev dependency (pip install -e .[dev]): a broken install fails here
from helpers import ROOT, run_vtlab

from vtlab.vocab.targets import CorpusWordPiece

pytestmark = pytest.mark.slow

models = qdrant_client.models

# appended to the README's commands: speed only (and fp32, so the export equals the evaluation on a bf16 CPU too)
FAST = {
    "evaluate": ["data.doc_max_length=64", "data.query_max_length=24"],
    "train": [
        "trainer.max_steps=6",
        "trainer.val_check_interval=3",
        "data.batch_size=4",
        "data.doc_max_length=64",
        "data.query_max_length=24",
        "apc.num_docs=64",
        "model.encoder.precision=fp32",
    ],
    "export": [],
}
K, TIE = 10, 1e-5

SYLLABLES = ["ka", "lo", "mi", "zu", "ter", "vo", "ran", "pel", "qui", "dos", "fen", "gar", "hul", "bri", "sna", "tov"]
HABITATS = ["marsh", "desert", "glacier", "reef", "canyon", "meadow", "cave", "forest", "delta", "tundra"]
FOODS = ["berries", "shrimp", "lichen", "seeds", "beetles", "kelp", "roots", "moss", "snails", "nectar"]
COLORS = ["amber", "slate", "crimson", "ivory", "teal", "ochre", "violet", "silver"]


FACTS = [
    "Its {color} coat darkens every winter.",
    "Adults weigh about {weight} grams and rarely live past {age} years.",
    "Herders in {region} tell stories of it crossing rivers at night.",
    "A survey in {year} counted {count} of them along a single ridge.",
    "Young ones stay with their mother until the {season} rains.",
    "It is hunted by owls and, near {region}, by wild cats.",
    "Its call sounds like two stones knocked together.",
    "Farmers in {region} consider it a sign of good {season} weather.",
]
REGIONS = ["Ostrava", "Kelmar", "the Vasi hills", "Lunder bay", "Ambrel", "the Tosk plateau", "Pirin", "Halden"]
SEASONS = ["spring", "autumn", "monsoon", "dry"]


def _species(rng: random.Random, n: int) -> list[dict]:
    """`n` made-up species with a varied passage each (facts drawn and ordered at random: no two passages are near
    copies of each other, so no test passage is a near-duplicate of a training one)."""
    names: set[str] = set()
    while len(names) < n:
        names.add("".join(rng.sample(SYLLABLES, 3)))
    out = []
    for name in sorted(names):
        s = {
            "name": name.capitalize(),
            "habitat": rng.choice(HABITATS),
            "food": rng.choice(FOODS),
            "color": rng.choice(COLORS),
        }
        values = {
            "color": s["color"],
            "weight": rng.randint(20, 900),
            "age": rng.randint(3, 30),
            "region": rng.choice(REGIONS),
            "year": rng.randint(1950, 2020),
            "count": rng.randint(4, 400),
            "season": rng.choice(SEASONS),
        }
        facts = [f.format(**values) for f in rng.sample(FACTS, 3)]
        s["passage"] = " ".join([f"The {s['name']} lives in the {s['habitat']} and feeds on {s['food']}.", *facts])
        out.append(s)
    return out


def _passage(s: dict) -> str:
    return s["passage"]


def _question(s: dict[str, str]) -> str:
    return f"what does the {s['name'].lower()} eat"


def _write_beir(root: Path, species: list[dict], extra: list[dict], split: str) -> None:
    """Questions about `species` over their passages plus `extra` passages as distractors."""
    (root / "qrels").mkdir(parents=True)
    docs = [(f"d{i}", s) for i, s in enumerate(species + extra)]
    (root / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": did, "title": s["name"], "text": _passage(s)}) + "\n" for did, s in docs)
    )
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"q{i}", "text": _question(s)}) + "\n" for i, s in enumerate(species))
    )
    (root / "qrels" / f"{split}.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(len(species)))
    )


def make_dataset(data: Path) -> dict[str, int]:
    """test/ (30 questions, 60 passages), dev/ (10 questions, 20 passages), 120 training triplets and the vocabulary's
    texts (the training passages): four disjoint sets of species, so no test or dev passage is trained on."""
    rng = random.Random(0)
    every = _species(rng, 250)
    rng.shuffle(every)
    test, test_extra, dev, dev_extra, train = (every[:30], every[30:60], every[60:70], every[70:80], every[80:200])
    _write_beir(data / "test", test, test_extra, "test")
    _write_beir(data / "dev", dev, dev_extra, "dev")
    with open(data / "triplets.jsonl", "w") as f:
        for s in train:
            negatives = [_passage(o) for o in rng.sample([o for o in train if o is not s], 3)]
            f.write(json.dumps({"query": _question(s), "positive": _passage(s), "negatives": negatives}) + "\n")
    with open(data / "texts.jsonl", "w") as f:
        for s in train + every[200:]:
            f.write(json.dumps({"title": s["name"], "text": _passage(s)}) + "\n")
    return {"test_docs": 60, "test_queries": 30, "dev_queries": 10}


def shingles(text: str, n: int = 8) -> set[tuple[str, ...]]:
    words = text.lower().split()
    return {tuple(words[i : i + n]) for i in range(max(1, len(words) - n + 1))}


def test_generated_test_passages_are_no_near_duplicates_of_training_ones(tmp_path):
    """The set itself is clean: no test passage shares half its 8-gram shingles with a training passage."""
    make_dataset(tmp_path)
    test = [json.loads(ln)["text"] for ln in (tmp_path / "test" / "corpus.jsonl").read_text().splitlines()]
    train = {
        t
        for ln in (tmp_path / "triplets.jsonl").read_text().splitlines()
        for t in (json.loads(ln)["positive"], *json.loads(ln)["negatives"])
    }
    train_sh = [shingles(t) for t in train]
    worst = max(len(a & b) / len(a | b) for a in map(shingles, test) for b in train_sh)
    assert worst < 0.5, worst


def readme_commands() -> list[list[str]]:
    """The `python -m vtlab` lines of README.md's "Use your own data" code block, as argument lists."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Use your own data", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README.md: no bash block under 'Use your own data'"
    lines = [ln for ln in block.group(1).splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return [shlex.split(ln) for ln in lines]


def _kind(args: list[str]) -> str:
    stage = next((a.split("=", 1)[1] for a in args if a.startswith("stage=")), "all")
    return {"evaluate": "evaluate", "export": "export"}.get(stage, "train")


def _run(args: list[str], data: Path, cwd: Path) -> str:
    assert args[:3] == ["python", "-m", "vtlab"], args
    argv = [*(a.replace("$DATA", str(data)) for a in args[3:]), *FAST[_kind(args)]]
    proc = run_vtlab(*argv, cwd=cwd, timeout=1200)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(proc.args)}\n{out[-4000:]}"
    return out


@pytest.fixture(scope="module")
def own_data(tmp_path_factory, shared_cache):
    """Every README command run once, in order, in a fresh working directory: (data dir, cwd, outputs per command)."""
    data, cwd = tmp_path_factory.mktemp("data"), tmp_path_factory.mktemp("work")
    sizes = make_dataset(data)
    commands = readme_commands()
    assert [_kind(c) for c in commands] == ["evaluate", "train", "export"], commands
    logs = [_run(c, data, cwd) for c in commands]
    return data, cwd, sizes, logs


def _metrics(run: Path, name: str) -> dict:
    return json.loads((run / "eval" / name / "metrics.json").read_text())


@pytest.mark.cli
def test_results_are_filed_under_the_collection_name(own_data):
    data, cwd, sizes, logs = own_data
    for run in (cwd / "outputs/mine/as-is", cwd / "outputs/mine/vt"):
        assert sorted(p.name for p in (run / "eval").iterdir() if p.is_dir()) == ["mteb", "test"], run
        report = _metrics(run, "test")
        assert report["collection"]["name"] == "test"
        assert (report["collection"]["n_docs"], report["collection"]["n_queries"]) == (
            sizes["test_docs"],
            sizes["test_queries"],
        )
    assert "evaluating test: 30 queries (30 judged) over 60 documents" in logs[0]


@pytest.mark.cli
def test_the_vocabulary_is_trained_on_the_users_texts(own_data):
    """The run's tokenizer is the WordPiece of texts.jsonl (titles prepended), the same one the vocabulary class builds
    from those texts directly, and not the default corpus's."""
    data, cwd, _, logs = own_data
    got = json.loads((cwd / "outputs/mine/vt/model/tokenizer.json").read_text())["model"]["vocab"]
    texts = [f"{o['title']} {o['text']}" for o in map(json.loads, (data / "texts.jsonl").read_text().splitlines())]
    want = CorpusWordPiece("corpus-wordpiece", corpus=texts).load_tokenizer().get_vocab()
    assert got == want
    assert len(got) < 2000  # these few texts support far fewer than vocab.vocab_size=20000 tokens
    assert "texts.jsonl" in logs[1] and "training a 20000-token WordPiece" in logs[1]


@pytest.mark.cli
def test_the_dev_set_chose_the_checkpoint(own_data):
    _, cwd, sizes, logs = own_data
    assert f"dev set dev: {sizes['dev_queries']} queries over 20 documents" in logs[1]
    assert "read 120 training triplets from" in logs[1]
    assert list((cwd / "outputs/mine/vt/checkpoints").glob("best-*.ckpt"))


@pytest.mark.cli
def test_export_encodes_the_runs_collection_and_qdrant_ranks_as_vtlab(own_data):
    data, cwd, sizes, _ = own_data
    run = cwd / "outputs/mine/vt"
    base = run / "vectors" / "qdrant"
    points = [json.loads(ln) for ln in (base / "points.jsonl").read_text().splitlines()]
    corpus_ids = [json.loads(ln)["_id"] for ln in (data / "test" / "corpus.jsonl").read_text().splitlines()]
    assert [p["payload"]["doc_id"] for p in points] == corpus_ids  # the run's collection, not BoolQ
    anserini = (run / "vectors" / "anserini" / "docs.jsonl").read_text().splitlines()
    assert [json.loads(ln)["id"] for ln in anserini] == corpus_ids

    client = qdrant_client.QdrantClient(":memory:")
    body = json.loads((base / "collection.json").read_text())
    client.create_collection(
        "own",
        sparse_vectors_config={
            name: models.SparseVectorParams(**params) for name, params in body["sparse_vectors"].items()
        },
    )
    client.upsert(
        "own",
        points=[
            models.PointStruct(
                id=p["id"],
                payload=p["payload"],
                vector={name: models.SparseVector(**v) for name, v in p["vector"].items()},
            )
            for p in points
        ],
    )

    ranked: dict[str, list[tuple[str, float]]] = {}  # the run's own evaluation ranking, from run.trec
    for line in (run / "eval" / "test" / "run.trec").read_text().splitlines():
        qid, _, did, _, score, _ = line.split()
        ranked.setdefault(qid, []).append((did, float(score)))
    queries = [json.loads(ln) for ln in (base / "queries.jsonl").read_text().splitlines()]
    assert len(queries) == sizes["test_queries"]
    bad = []
    for body in queries:
        hits = client.query_points(
            "own", query=models.SparseVector(**body["query"]), using=body["using"], limit=K, with_payload=True
        ).points
        got = [(h.payload["doc_id"], float(h.score)) for h in hits]
        want = [(d, s) for d, s in ranked.get(body["query_id"], [])[:K] if s > 0]
        tied = lambda a, b: abs(a - b) <= TIE * max(1.0, abs(b))  # noqa: E731 - float summation order only
        ok = len(got) == len(want) and all(
            tied(gs, ws) and (gd == wd or any(d == gd and tied(s, gs) for d, s in want))
            for (gd, gs), (wd, ws) in zip(got, want)
        )
        if not ok:
            bad.append(body["query_id"])
    assert bad == []
