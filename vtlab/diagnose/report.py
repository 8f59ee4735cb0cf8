"""The diagnose report over one or more candidates: report.md, report.json and PNG plots in one directory.

Each job of `stage=diagnose` writes its figures as `<run_dir>/diagnose/diagnose.json`; `collect(dir)` reads every such
file under a directory (a multirun's sweep dir) and `render` compares them, so the combined report can be rebuilt at
any time (`python -m vtlab.diagnose DIR`). The plots are drawn by vtlab/diagnose/plots.py, report.md is written by
vtlab/diagnose/markdown.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vtlab.core.atomic import atomic_write, write_json
from vtlab.core.errors import VtlabError
from vtlab.core.json_files import read_json
from vtlab.diagnose.markdown import report_markdown
from vtlab.diagnose.plots import render_plots
from vtlab.diagnose.verdict import best, rank, suggest

RESULT_FILE = "diagnose.json"


def collect(root: str | Path) -> list[dict[str, Any]]:
    """Every `diagnose.json` under `root` (sorted by path), with labels made unique."""
    root = Path(root)
    if not root.is_dir():
        raise VtlabError(f"{root}: not a directory")
    results = []

    # job number order (2 before 10); (0, n) / (1, name) keys never compare an int with a str
    def order(p: Path) -> list[tuple[int, int | str]]:
        return [(0, int(s)) if s.isdigit() else (1, s) for s in p.parts]

    for path in sorted(root.rglob(RESULT_FILE), key=order):
        result = read_json(path, dict, "a diagnose result")
        if not isinstance(result.get("candidate"), dict):
            raise VtlabError(f'{path}: not a diagnose result (no "candidate" object)')
        result["candidate"]["job_dir"] = str(path.parent)
        results.append(result)
    return unique_labels(results)


def unique_labels(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Same backbone × vocab twice (e.g. an apc sweep): add the apc, then the job directory, to the label."""
    for extra in (lambda c: f"apc={c['apc']}", lambda c: Path(c.get("job_dir", "?")).parent.name):
        counts = Counter(r["candidate"]["label"] for r in results)
        for r in results:
            if counts[r["candidate"]["label"]] > 1:
                r["candidate"]["label"] += f" · {extra(r['candidate'])}"
    return results


def render(results: Sequence[dict[str, Any]], out_dir: str | Path) -> dict[str, Path]:
    """Write report.md, report.json and the PNGs comparing `results` into `out_dir`; return their paths."""
    if not results:
        raise VtlabError(f"{out_dir}: no diagnose results to report")
    out_dir = Path(out_dir)
    ranking = rank(results)
    suggestions = [suggest(results[e["_index"]]) for e in ranking]  # best first
    top = best(ranking)
    paths = render_plots(results, out_dir)
    md = report_markdown(results, ranking, suggestions, top)
    paths["markdown"] = atomic_write(out_dir / "report.md", lambda f: f.write("\n".join(md)))
    ranking_out = [{k: v for k, v in e.items() if k != "_index"} for e in ranking]
    paths["json"] = write_json(
        out_dir / "report.json",
        {
            "corpus": results[0]["corpus"],
            "best": top["label"] if top else None,
            "ranking": ranking_out,
            "suggestion": suggestions[0],
            "suggestions": suggestions,
            "candidates": list(results),
        },
    )
    return paths
