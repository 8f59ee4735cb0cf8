"""The table and its contrasts as text: markdown (also printed), CSV (numbers unrounded, full error text) and a
booktabs LaTeX table, each written atomically (see vtlab.report); likewise a comparison of single runs
(vtlab.report.comparison: compare.md, compare.csv, per_query.csv)."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from pathlib import Path

from vtlab.core.atomic import atomic_write
from vtlab.report.comparison import DIMS, Comparison
from vtlab.report.lines import ContrastLine, Contrasts
from vtlab.report.readings import MARK, format_p, format_signed, plan_cell
from vtlab.report.tables import Cell, Row, Table

OUTPUT_NAMES = ("table.md", "table.csv", "table.tex")
CONTRAST_NAMES = ("contrasts.md", "contrasts.csv")
COMPARISON_NAMES = ("compare.md", "compare.csv", "per_query.csv")
MAX_NOTE_CHARS = 200  # errors are cut in markdown/LaTeX cells (the CSV keeps them whole)


def _fmt(x: float | None, decimals: int) -> str:
    return "" if x is None else f"{x:.{decimals}f}"


def _cell_text(cell: Cell, decimals: int, row_n: int, pm: str) -> str:
    if cell.mean is None:
        return ""
    text = _fmt(cell.mean, decimals) + (f"{pm}{_fmt(cell.std, decimals)}" if cell.std is not None else "")
    return text if cell.n == row_n else f"{text} (n={cell.n})"


def _short(text: str) -> str:
    return text if len(text) <= MAX_NOTE_CHARS else text[: MAX_NOTE_CHARS - 1] + "…"


def _row_texts(table: Table, row: Row, pm: str) -> list[str]:
    cells = [_cell_text(c, col.decimals, row.n, pm) for c, col in zip(row.cells, table.columns)]
    return [row.label, str(row.n), *cells, _short(row.status)]


def _headers(table: Table) -> list[str]:
    return ["run", "n", *(c.header for c in table.columns), "status"]


def _md_line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") or "–" for c in cells) + " |"


def to_markdown(table: Table) -> str:
    headers = _headers(table)
    rule = "|" + "|".join(["---", *["---:"] * (len(headers) - 2), "---"]) + "|"  # numbers right-aligned
    lines = [f"### {table.title}", "", _md_line(headers), rule]
    lines += [_md_line(_row_texts(table, row, " ± ")) for row in table.rows]
    return "\n".join([*lines, "", *(f"{f}." for f in table.footer)]) + "\n"


def to_csv(table: Table) -> str:
    """One line per row; numbers unrounded, a `<column> std` and `<column> n` after each mean; full error text."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["run", "n", *(f"{c.header}{s}" for c in table.columns for s in ("", " std", " n")), "status"])
    for row in table.rows:
        stats = [x for c in row.cells for x in (c.mean, c.std, c.n)]
        writer.writerow([row.label, row.n, *("" if x is None else repr(x) for x in stats), row.status])
    return out.getvalue()


_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "|": r"\textbar{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "±": r"$\pm$",
}
_LATEX_RE = re.compile("|".join(re.escape(c) for c in _LATEX_SPECIAL))


def latex_escape(text: str) -> str:
    return _LATEX_RE.sub(lambda m: _LATEX_SPECIAL[m.group()], text)


def to_latex(table: Table) -> str:
    """A booktabs `table` with a `tabular`: the markdown's rows and cells, footer as the caption."""
    headers = _headers(table)
    spec = "l" + "r" * (len(headers) - 2) + "l"
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        " & ".join(latex_escape(h) for h in headers) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(latex_escape(c) or "--" for c in _row_texts(table, row, " ± ")) + r" \\" for row in table.rows]
    caption = latex_escape(f"{table.title}: {table.footer[0]}.")
    lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", r"\end{table}"]
    return "\n".join([f"% {' '.join(f.split())}" for f in table.footer[1:]] + lines) + "\n"


def _p(line: ContrastLine, p: float) -> str:
    """A p-value, marked where the line is exploratory (outside the Holm family or in an exploratory table)."""
    text = format_p(p)
    return f"{text} {MARK}" if text and line.exploratory else text


def _seed_texts(line: ContrastLine) -> list[str]:
    """matched seeds, Δ seeds, p seed (t), p seed (sign-flip), p seed Holm, seeds to decide, reading."""
    r = line.seed
    if r is None:
        return ["", "", "", "", "", "", line.reading]
    holm = "" if line.p_seed_holm is None else _p(line, line.p_seed_holm)
    p_t = "–" if r.p_t != r.p_t else _p(line, r.p_t)
    p_flip = _p(line, r.p) + ("" if r.exact else " (sampled)")
    return [str(r.n), format_signed(r.delta), p_t, p_flip, holm, plan_cell(line), line.reading]


def _contrast_texts(line: ContrastLine) -> list[str]:
    r = line.result
    head = [f"{line.a} − {line.b}" + (" (primary)" if line.primary else ""), line.dataset, line.budget]
    if r is None:
        return [*head, "", f"{line.seeds_a}/{line.seeds_b}", "", "", "", "", "", "", *_seed_texts(line), line.note]
    ci = f"[{format_signed(r.ci_low)}, {format_signed(r.ci_high)}]" if r.ci_low == r.ci_low else ""
    return [
        *head,
        str(r.n),
        f"{line.seeds_a}/{line.seeds_b}",
        f"{r.mean_a:.4f}",
        f"{r.mean_b:.4f}",
        format_signed(r.delta),
        ci,
        _p(line, r.p_randomization),
        _p(line, r.p_t),
        *_seed_texts(line),
        line.note,
    ]


CONTRAST_HEADERS = (
    "A − B",
    "set",
    "budget",
    "queries",
    "seeds A/B",
    "A {m}",
    "B {m}",
    "Δ",
    "95% CI",
    "p query (sign-flip)",
    "p query (t)",
    "matched seeds",
    "Δ seeds",
    "p seed (t)",
    "p seed (sign-flip)",
    "p seed Holm",
    "seeds to decide",
    "reading",
    "note",
)
_TEXT_HEADERS = {"A − B", "set", "budget", "reading", "note"}  # left-aligned; the others are numbers


def contrasts_markdown(contrasts: Contrasts) -> str:
    headers = [h.format(m=contrasts.measure) for h in CONTRAST_HEADERS]
    rule = "|" + "|".join("---" if h in _TEXT_HEADERS else "---:" for h in CONTRAST_HEADERS) + "|"
    lines = [f"### {contrasts.title}", "", _md_line(headers), rule]
    lines += [_md_line(_contrast_texts(x)) for x in contrasts.lines]
    return "\n".join([*lines, "", *(f"{f}." for f in contrasts.footer)]) + "\n"


def contrasts_csv(contrasts: Contrasts) -> str:
    """One line per contrast, collection and budget; numbers unrounded."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    fields = ("n", "mean_a", "mean_b", "delta", "ci_low", "ci_high", "p_randomization", "p_t")
    seed_fields = ("matched_seeds", "delta_seeds", "ci_seed_low", "ci_seed_high", "p_seed_t", "p_seed", "p_seed_exact")
    writer.writerow(
        [
            "a",
            "b",
            "set",
            "budget",
            "seeds_a",
            "seeds_b",
            "measure",
            *fields,
            *seed_fields,
            "p_seed_holm",
            "seeds_to_decide",
            "primary",
            "exploratory",
            "reading",
            "note",
        ]
    )
    for x in contrasts.lines:
        numbers = ["" if x.result is None else repr(getattr(x.result, f)) for f in fields]
        s = x.seed
        seeds = [""] * len(seed_fields) if s is None else [s.n, *map(repr, (s.delta, *s.ci, s.p_t, s.p)), s.exact]
        holm = "" if x.p_seed_holm is None else repr(x.p_seed_holm)
        writer.writerow(
            [
                x.a,
                x.b,
                x.dataset,
                x.budget,
                x.seeds_a,
                x.seeds_b,
                contrasts.measure,
                *numbers,
                *seeds,
                holm,
                "" if x.seeds_to_decide is None else x.seeds_to_decide,
                x.primary,
                x.exploratory,
                x.reading,
                x.note,
            ]
        )
    return out.getvalue()


def write_text(path: str | Path, text: str) -> Path:
    """Atomic (vtlab.core.atomic: a temp file renamed into place): readers never see half a table."""
    return atomic_write(path, lambda f: f.write(text))


def write_table(table: Table, out_dir: str | Path) -> list[Path]:
    renders = (to_markdown, to_csv, to_latex)
    return [write_text(Path(out_dir) / name, render(table)) for name, render in zip(OUTPUT_NAMES, renders)]


def write_contrasts(contrasts: Contrasts, out_dir: str | Path) -> list[Path]:
    renders = (contrasts_markdown, contrasts_csv)
    return [write_text(Path(out_dir) / name, render(contrasts)) for name, render in zip(CONTRAST_NAMES, renders)]


# ---------------------------------------------------------------------------------------------------- single runs


def _comparison_columns(c: Comparison) -> list[tuple[str, str | None, str, int]]:
    """(header, collection or None for the average over them, metrics.json key, decimals) of the comparison's table:
    per collection the measure and the active dims, then, with several collections, their averages."""
    keys = [(c.measure, c.measure, 4), *((h, k, 1) for h, k in DIMS)]
    groups = [*c.datasets, *([None] if len(c.datasets) > 1 else [])]
    return [(f"{d or 'avg'} {h}", d, k, dec) for d in groups for h, k, dec in keys]


def _comparison_value(c: Comparison, run: int, dataset: str | None, key: str) -> float | None:
    return c.average(run, key) if dataset is None else c.value(run, dataset, key)


def comparison_markdown(c: Comparison) -> str:
    """The runs' table (one row per run), then each later run's per-query differences against the first."""
    cols = _comparison_columns(c)
    lines = [f"### {c.measure} and active dims of {len(c.labels)} runs", "", _md_line(["run", *(h for h, *_ in cols)])]
    lines.append("|---|" + "---:|" * len(cols))
    for i, label in enumerate(c.labels):
        lines.append(_md_line([label, *(_fmt(_comparison_value(c, i, d, k), dec) for _, d, k, dec in cols)]))
    headers = ["run", "set", "queries", f"{c.labels[0]} {c.measure}", f"run {c.measure}", "Δ", "95% CI"]
    headers += ["p (sign-flip)", "p (t)", "better/same/worse", "note"]
    lines += ["", f"#### per-query {c.measure} against {c.labels[0]} (Δ = run − {c.labels[0]})", "", _md_line(headers)]
    lines.append("|---|---|" + "---:|" * 8 + "---|")
    for x in c.diffs:
        r = x.result
        if r is None:
            lines.append(_md_line([x.label, x.dataset, *[""] * 8, x.note]))
            continue
        ci = f"[{format_signed(r.ci_low)}, {format_signed(r.ci_high)}]" if r.ci_low == r.ci_low else ""
        numbers = [str(r.n), f"{r.mean_b:.4f}", f"{r.mean_a:.4f}", format_signed(r.delta), ci]
        p = [format_p(r.p_randomization), format_p(r.p_t), "/".join(map(str, x.counts()))]
        lines.append(_md_line([x.label, x.dataset, *numbers, *p, x.note]))
    return "\n".join([*lines, "", *c.footer]) + "\n"


def comparison_csv(c: Comparison) -> str:
    """One line per run: its label, directory, status and the table's numbers unrounded."""
    cols = _comparison_columns(c)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["run", "path", "status", *(h for h, *_ in cols)])
    for i, (label, job) in enumerate(zip(c.labels, c.jobs)):
        values = [_comparison_value(c, i, d, k) for _, d, k, _ in cols]
        writer.writerow([label, job.path, job.state.value, *("" if v is None else repr(v) for v in values)])
    return out.getvalue()


def per_query_csv(c: Comparison) -> str:
    """One line per later run, collection and query: the first run's value, the run's, their difference."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["run", "set", "query", "measure", "first", "run_value", "delta"])
    for x in c.diffs:
        for query, (a, b) in x.pairs.items():
            writer.writerow([x.label, x.dataset, query, c.measure, repr(a), repr(b), repr(b - a)])
    return out.getvalue()


def write_comparison(c: Comparison, out_dir: str | Path) -> list[Path]:
    renders = (comparison_markdown, comparison_csv, per_query_csv)
    return [write_text(Path(out_dir) / name, render(c)) for name, render in zip(COMPARISON_NAMES, renders)]
