"""Index and search vtlab's Anserini export with the real Anserini (its fat jar via `java -cp`; no Python bridge).

    python -m vtlab.export.anserini <export.vectors.dir> [--hits 100]

reads <dir>/anserini/docs.jsonl and <dir>/anserini/queries.tsv (stage=export with export.vectors.formats=[anserini]
export.vectors.queries=true), builds the impact index <dir>/anserini/index (`IndexCollection -collection
JsonVectorCollection -impact -pretokenized`) and writes the TREC run <dir>/anserini/run.trec (`SearchCollection
-topicreader TsvString -impact -pretokenized`): each score is Σ query count × document integer weight. The jar is the
`anserini-jar` asset (`python -m vtlab.core.assets install`); Java 11 or newer must be on PATH.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from vtlab.core.assets import asset_path
from vtlab.core.errors import VtlabError

INDEXER = "io.anserini.index.IndexCollection"
SEARCHER = "io.anserini.search.SearchCollection"


def java() -> str:
    """The `java` executable; VtlabError (one line, with the fix) when there is none."""
    exe = shutil.which("java")
    if exe is None:
        raise VtlabError("java is not on PATH; install a JRE 11+ (Debian: apt-get install -y openjdk-17-jre-headless)")
    return exe


def _run(cmd: list[str], what: str, log: Path) -> None:
    with open(log, "w") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
        raise VtlabError(f"anserini {what} exited {done.returncode} (log: {log}): {tail[0]}")


def index(docs: Path, index_dir: Path, threads: int = 1) -> Path:
    """Impact index of a JsonVectorCollection file (`docs`), written to `index_dir` (replaced)."""
    if not docs.is_file():
        raise VtlabError(f"{docs}: no such file (stage=export export.vectors.formats=[anserini] writes it)")
    shutil.rmtree(index_dir, ignore_errors=True)
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=index_dir.parent) as tmp:
        # IndexCollection reads a directory: give it one holding only this file
        (Path(tmp) / docs.name).symlink_to(docs.resolve())
        _run(
            [
                java(),
                "-cp",
                str(asset_path("anserini-jar")),
                INDEXER,
                "-collection",
                "JsonVectorCollection",
                "-input",
                tmp,
                "-index",
                str(index_dir),
                "-generator",
                "DefaultLuceneDocumentGenerator",
                "-threads",
                str(threads),
                "-impact",
                "-pretokenized",
                "-optimize",
            ],
            "IndexCollection",
            index_dir.parent / "index.log",
        )
    return index_dir


def search(index_dir: Path, topics: Path, run: Path, hits: int = 100) -> Path:
    """TREC run of pretokenized TSV `topics` against an impact index (scores: integer dot products)."""
    if not topics.is_file():
        raise VtlabError(f"{topics}: no such file (stage=export export.vectors.queries=true writes it)")
    _run(
        [
            java(),
            "-cp",
            str(asset_path("anserini-jar")),
            SEARCHER,
            "-index",
            str(index_dir),
            "-topics",
            str(topics),
            "-topicreader",
            "TsvString",
            "-output",
            str(run),
            "-impact",
            "-pretokenized",
            "-hits",
            str(hits),
        ],
        "SearchCollection",
        run.with_suffix(".log"),
    )
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vtlab.export.anserini", description=__doc__.split("\n\n")[0])
    parser.add_argument("vectors", type=Path, help="export.vectors.dir (holds anserini/docs.jsonl, queries.tsv)")
    parser.add_argument("--hits", type=int, default=100)
    args = parser.parse_args(argv)
    base = args.vectors / "anserini"
    try:
        idx = index(base / "docs.jsonl", base / "index")
        run = search(idx, base / "queries.tsv", base / "run.trec", hits=args.hits)
    except VtlabError as e:
        print(f"vtlab: error: {e}", file=sys.stderr)
        return 1
    print(run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
