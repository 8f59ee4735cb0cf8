"""The table and its contrasts as text: markdown (also printed), CSV (numbers unrounded, full error text) and a
booktabs LaTeX table, each written atomically (see vtlab.report)."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from pathlib import Path

from vtlab.core.atomic import atomic_write
from vtlab.report.lines import ContrastLine, Contrasts
from vtlab.report.readings import MARK, format_p, format_signed, plan_cell
from vtlab.report.tables import Cell, Row, Table

OUTPUT_NAMES = ("table.md", "table.csv", "table.tex")
CONTRAST_NAMES = ("contrasts.md", "contrasts.csv")
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
