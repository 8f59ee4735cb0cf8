"""The import layering of docs/architecture.md, enforced: entry → stages → library → foundations, no cycles,
no function-level vtlab imports (they only hide cycles). Every module under vtlab/ is parsed with `ast`, never
imported, so a broken or slow module cannot hide a violation. Adjust LIBRARY_FOLDERS / LAYERS / LAZY_IMPORTS below,
nothing else."""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

import pytest
from helpers import ROOT

# Layer of each module: the first layer (top to bottom) with a matching pattern (fnmatch on dotted module names).
# An import may point down (to a later layer) or stay within its layer; upward imports are refused. The patterns name
# folders only (the vtlab/ root holds __init__ and __main__ alone): a module no pattern matches (a loose module, a new
# folder) is refused until it is placed here, so the folder tree shows the layers. Between folders the imports form no
# circle either (FOLDER_CIRCLES).
LIBRARY_FOLDERS = (
    "vocab",
    "models",
    "losses",
    "regularizers",
    "data",
    "index",
    "evaluation",
    "callbacks",
    "diagnose",
    "export",
    "backbones",
    "tracking",
    "apc",
    "runtime",
)
LAYERS: dict[str, list[str]] = {
    "entry": [
        "vtlab.__main__",
        "vtlab.reproduce",
        "vtlab.reproduce.*",
        "vtlab.report",
        "vtlab.report.*",
        "vtlab.bench",
        "vtlab.bench.*",
        "*.__main__",
    ],
    "stages": ["vtlab.stages", "vtlab.stages.*"],
    "library": [f"vtlab.{folder}{tail}" for folder in LIBRARY_FOLDERS for tail in ("", ".*")],
    "foundations": ["vtlab", "vtlab.core", "vtlab.core.*", "vtlab.runs", "vtlab.runs.*"],
}
RANK = {"entry": 3, "stages": 2, "library": 1, "foundations": 0}  # higher may import lower
# The one stage module every stage may import (shared builders); any other stage → stage import is refused, but the
# pipeline, which runs the stages a config names, imports them all.
STAGES_SHARED = {"vtlab.stages", "vtlab.stages.build"}
PIPELINE = "vtlab.stages.pipeline"
# Function-level vtlab imports that are allowed: (importing module, imported module) → why it must stay lazy.
LAZY_IMPORTS: dict[tuple[str, str], str] = {
    # the entry answers a command line's mistakes (vtlab.runs.precheck) before torch loads: what imports it waits
    ("vtlab.__main__", "vtlab.runs.signals"): "imports Lightning (torch): after the command line is checked",
    ("vtlab.__main__", "vtlab.runs.lifecycle"): "imports vtlab.runs.world (torch): after the command line is checked",
    ("vtlab.__main__", "vtlab.stages.pipeline"): "the stages (torch, models): after the command line is checked",
    # bench workers: each tool is measured in its own process, so a peer's process must not load vtlab's torch code
    ("vtlab.bench.common", "vtlab.runtime.precision"): "imports torch; the ONNX Runtime encode worker (which imports "
    "bench.common) must run without torch",
    ("vtlab.bench.common", "vtlab.runtime.fused"): "imports torch; the ONNX Runtime encode worker (which imports "
    "bench.common) must run without torch",
    ("vtlab.bench.encode", "vtlab.backbones"): "loads torch/transformers + vtlab's model: not in the st/onnx workers",
    ("vtlab.bench.encode", "vtlab.models.encoder"): "vtlab's encoder (torch): not in the st/onnx encode workers",
    ("vtlab.bench.encode", "vtlab.runtime.body"): "torch: the floor row's body, as vtlab runs it; not in st/onnx",
    ("vtlab.bench.encode", "vtlab.data.boolq"): "auto's probe texts, vtlab's model only; not in the st/onnx workers",
    ("vtlab.bench.encode", "vtlab.runtime.pooling"): "torch: only the floor row uses it; not in the st/onnx workers",
    ("vtlab.bench.encode", "vtlab.runtime.fused"): "torch: which kernel pooled, in vtlab's rows only; not in st/onnx",
    ("vtlab.bench.encode", "vtlab.export.onnx"): "exporter imports torch: not in the onnx worker (runs without torch)",
    ("vtlab.bench.train", "vtlab.backbones"): "vtlab's model: not in the st train worker (its peak RSS is measured)",
    ("vtlab.bench.train", "vtlab.losses"): "vtlab's loss: not in the st train worker (its peak RSS is measured)",
    ("vtlab.bench.train", "vtlab.models.encoder"): "vtlab's encoder: not in the st train worker (peak RSS measured)",
    ("vtlab.bench.train", "vtlab.models.splade"): "vtlab's Lightning module: not in the st train worker (peak RSS)",
    ("vtlab.bench.train", "vtlab.regularizers"): "vtlab's regularizers: not in the st train worker (peak RSS)",
    ("vtlab.bench.retrieval", "vtlab.index"): "imported after the build's RSS baseline, so rss_after_build_mb keeps "
    "its meaning (scipy peer included); see bench/retrieval.py",
    ("vtlab.bench.retrieval", "vtlab.index.seismic"): "imported after the build's RSS baseline (it loads vtlab.index "
    "too); see bench/retrieval.py",
    ("vtlab.bench.retrieval", "vtlab.core.assets"): "loads hydra/omegaconf (~7 MB): moving it before the RSS baseline "
    "would shift the BoolQ rows' build RSS; see bench/retrieval.py",
}


@dataclass(frozen=True)
class Import:
    src: str  # importing module, dotted
    dst: str  # imported vtlab module, dotted (an imported attribute is resolved to its module)
    path: str  # file of `src`, relative to the package's parent
    line: int
    in_function: bool

    def where(self) -> str:
        return f"{self.path}:{self.line}"


def modules(package_dir: Path) -> dict[str, Path]:
    """Dotted name → file, for every .py under the package (a package's name is its __init__.py's)."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The module `name` lives in: itself, else its nearest known parent (an attribute such as vtlab.core.errors.X)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(package_dir: Path) -> list[Import]:
    """Every import of a module of the package by a module of the package: module- and function-level, absolute and
    relative, `import a.b`, `from a import b` (b a submodule or an attribute)."""
    known = modules(package_dir)
    package = package_dir.name
    found = []
    for src, path in known.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        rel = str(path.relative_to(package_dir.parent))

        def visit(node: ast.AST, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                targets: list[str] = []
                if isinstance(child, ast.Import):
                    targets = [a.name for a in child.names]
                elif isinstance(child, ast.ImportFrom):
                    if child.level:  # relative: from the containing package, one level up per extra dot
                        base = src.split(".") if is_pkg else src.split(".")[:-1]
                        base = base[: len(base) - (child.level - 1)]
                        mod = ".".join(base + ([child.module] if child.module else []))
                    else:
                        mod = child.module or ""
                    # `from m import x`: x is a submodule if one exists, else an attribute of m
                    targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in child.names]
                for t in dict.fromkeys(targets):
                    if t == package or t.startswith(package + "."):
                        dst = _resolve(t, known)
                        if dst is not None and dst != src:
                            found.append(Import(src, dst, rel, child.lineno, in_function))
                visit(child, inner)

        visit(tree, False)
    return found


def layer(module: str) -> str | None:
    """The layer of `module`; None when no pattern of LAYERS matches it."""
    return next((name for name, patterns in LAYERS.items() if any(fnmatchcase(module, p) for p in patterns)), None)


def unplaced(package_dir: Path) -> list[str]:
    """Every module of the package that is in no layer (a loose module in the package root, an unlisted folder)."""
    return [
        f"{path.relative_to(package_dir.parent)}: {name} is in no layer; move it into the folder of its concept, "
        "or place it in LAYERS"
        for name, path in modules(package_dir).items()
        if layer(name) is None
    ]


def layer_violations(edges: list[Import]) -> list[str]:
    out = []
    for e in edges:
        a, b = layer(e.src), layer(e.dst)
        if RANK[b] > RANK[a]:
            out.append(
                f"{e.where()}: {e.src} imports {e.dst}: upward import ({a} → {b}); {a} may import only "
                f"{', '.join(n for n in RANK if RANK[n] <= RANK[a])}"
            )
        elif a == b == "stages" and e.src not in STAGES_SHARED | {PIPELINE} and e.dst not in STAGES_SHARED:
            out.append(
                f"{e.where()}: {e.src} imports {e.dst}: stage → stage; stages share code only through "
                "vtlab.stages.build"
            )
    return out


def function_level_violations(edges: list[Import], allowed: dict[tuple[str, str], str]) -> list[str]:
    return [
        f"{e.where()}: {e.src} imports {e.dst} inside a function; import it at module level (break the cycle it "
        "hides), or add it to LAZY_IMPORTS with the reason"
        for e in edges
        if e.in_function and (e.src, e.dst) not in allowed
    ]


def cycles(edges: list[Import]) -> list[str]:
    """One readable cycle per strongly connected component of the import graph (function-level imports included:
    they are real dependencies)."""
    graph: dict[str, dict[str, Import]] = {}
    for e in edges:
        graph.setdefault(e.src, {}).setdefault(e.dst, e)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def strongconnect(v: str) -> None:  # Tarjan; the package is small enough for recursion
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(comp)

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    out = []
    for comp in sorted(components, key=min):
        start = min(comp)
        # shortest way back to `start` inside the component (BFS)
        prev: dict[str, str] = {}
        frontier, seen, end = [start], {start}, None
        while frontier and end is None:
            nxt = []
            for v in frontier:
                for w in sorted(graph.get(v, {})):
                    if w == start:
                        end = v
                        break
                    if w in comp and w not in seen:
                        seen.add(w)
                        prev[w] = v
                        nxt.append(w)
                if end is not None:
                    break
            frontier = nxt
        path = [end]
        while path[-1] != start:
            path.append(prev[path[-1]])
        path.reverse()
        hops = [graph[a][b] for a, b in zip(path, path[1:] + [start])]
        out.append(
            f"import cycle {' → '.join(path + [start])} ("
            + "; ".join(f"{h.where()}{' in a function' if h.in_function else ''}" for h in hops)
            + (f"; {len(comp)} modules in this tangle: {', '.join(sorted(comp))}" if len(comp) > len(path) else "")
            + ")"
        )
    return out


def folder(module: str) -> str:
    """The folder a module lives in, as a node of the tree: `vtlab.core` for vtlab.core.errors, `vtlab` for the
    package's own __init__/__main__."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and parts[1] != "__main__" else parts[0]


def folder_circles(edges: list[Import]) -> list[str]:
    """One readable circle per tangle of folders: a folder that imports another which (through any others) imports
    it back, each hop shown by one import that makes it."""
    between = [
        Import(folder(e.src), folder(e.dst), e.path, e.line, e.in_function)
        for e in edges
        if folder(e.src) != folder(e.dst)
    ]
    return cycles(between)


def check(package_dir: Path, allowed: dict[tuple[str, str], str] = LAZY_IMPORTS) -> list[str]:
    edges = imports(package_dir)
    placed = [e for e in edges if layer(e.src) is not None and layer(e.dst) is not None]
    return (
        [f"[unplaced] {u}" for u in unplaced(package_dir)]
        + [f"[cycle] {c}" for c in cycles(edges)]
        + [f"[folder circle] {c}" for c in folder_circles(edges)]
        + [f"[layer] {v}" for v in layer_violations(placed)]
        + [f"[function-level import] {v}" for v in function_level_violations(edges, allowed)]
    )


def test_vtlab_import_layering():
    problems = check(ROOT / "vtlab")
    if problems:
        pytest.fail(
            f"{len(problems)} import-layering violation(s) (rules: tests/house/test_layers.py, "
            "docs/architecture.md):\n  " + "\n  ".join(problems),
            pytrace=False,
        )


def test_lazy_import_allowlist_is_still_needed():
    """An allowlist entry whose import is gone (or became module-level) must go too: the list only shrinks."""
    lazy = {(e.src, e.dst) for e in imports(ROOT / "vtlab") if e.in_function}
    assert set(LAZY_IMPORTS) <= lazy, f"stale LAZY_IMPORTS entries: {sorted(set(LAZY_IMPORTS) - lazy)}"


def test_the_package_root_holds_only_its_entry_point():
    """Code lives in folders, one per layer's concept: the root keeps __init__ and __main__ alone."""
    root = {p.name for p in (ROOT / "vtlab").glob("*.py")}
    assert root == {"__init__.py", "__main__.py"}, (
        f"loose modules in vtlab/: {sorted(root - {'__init__.py', '__main__.py'})}"
    )


# -- the checker itself, on tiny synthetic packages named vtlab (so the real LAYERS table applies) --------------------
CLEAN = {
    "__init__.py": "",
    "__main__.py": "from vtlab.stages import train\nfrom vtlab.models import encoder\n",
    "core/__init__.py": "",
    "core/errors.py": "class VtlabError(Exception):\n    pass\n",
    "models/__init__.py": "",
    "models/encoder.py": "from vtlab.core.errors import VtlabError\nfrom ..data import text\n",
    "data/__init__.py": "",
    "data/text.py": "from ..core.errors import VtlabError\n",
    "stages/__init__.py": "",
    "stages/build.py": "from vtlab.models import encoder\n",
    "stages/train.py": (
        "from vtlab.stages.build import encoder\nfrom ..core.errors import VtlabError\nimport vtlab.models.encoder\n"
    ),
    "index/__init__.py": "def load():\n    from vtlab.index.seismic import Seismic\n    return Seismic\n",
    "index/seismic.py": "from vtlab.core.errors import VtlabError\n",
}


def _check(tmp_path: Path, files: dict[str, str]) -> list[str]:
    for name, text in {**CLEAN, **files}.items():
        f = tmp_path / "vtlab" / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(textwrap.dedent(text))
    return check(tmp_path / "vtlab", allowed={("vtlab.index", "vtlab.index.seismic"): "optional backend"})


def test_checker_passes_a_clean_package(tmp_path):
    assert _check(tmp_path, {}) == []
    edges = {(e.src, e.dst, e.in_function) for e in imports(tmp_path / "vtlab")}
    assert ("vtlab.models.encoder", "vtlab.data.text", False) in edges  # from ..data import text (a submodule)
    assert ("vtlab.data.text", "vtlab.core.errors", False) in edges  # from ..core.errors import X (an attribute)
    assert ("vtlab.stages.train", "vtlab.core.errors", False) in edges
    assert ("vtlab.stages.train", "vtlab.models.encoder", False) in edges  # import vtlab.models.encoder
    assert ("vtlab.index", "vtlab.index.seismic", True) in edges  # allowlisted lazy import


def test_checker_refuses_a_module_in_no_layer(tmp_path):
    problems = _check(
        tmp_path,
        {
            "helpers.py": "from vtlab.core.errors import VtlabError\n",
            "training/__init__.py": "",
            "training/loop.py": "from vtlab import helpers\n",
        },
    )
    assert problems == [
        "[unplaced] vtlab/helpers.py: vtlab.helpers is in no layer; move it into the folder of its concept, or place "
        "it in LAYERS",
        "[unplaced] vtlab/training/__init__.py: vtlab.training is in no layer; move it into the folder of its "
        "concept, or place it in LAYERS",
        "[unplaced] vtlab/training/loop.py: vtlab.training.loop is in no layer; move it into the folder of its "
        "concept, or place it in LAYERS",
    ]


def test_checker_reports_a_cycle_with_its_path(tmp_path):
    problems = _check(
        tmp_path, {"data/text.py": "from vtlab.core.errors import VtlabError\nimport vtlab.models.encoder\n"}
    )
    assert problems == [
        "[cycle] import cycle vtlab.data.text → vtlab.models.encoder → vtlab.data.text (vtlab/data/text.py:2; "
        "vtlab/models/encoder.py:2)",
        "[folder circle] import cycle vtlab.data → vtlab.models → vtlab.data (vtlab/data/text.py:2; "
        "vtlab/models/encoder.py:2)",
    ]


def test_checker_reports_a_circle_between_folders_without_a_module_cycle(tmp_path):
    """data.text → models.encoder → data.other: no module comes back to itself, but the folders do."""
    problems = _check(
        tmp_path,
        {
            "data/other.py": "x = 1\n",
            "data/text.py": "from vtlab.models import encoder\n",
            "models/encoder.py": "from vtlab.data import other\n",
        },
    )
    assert problems == [
        "[folder circle] import cycle vtlab.data → vtlab.models → vtlab.data (vtlab/data/text.py:1; "
        "vtlab/models/encoder.py:1)"
    ]


def test_checker_reports_upward_imports(tmp_path):
    problems = _check(
        tmp_path,
        {
            "core/errors.py": "from vtlab.models import encoder\n",  # foundations → library
            "data/text.py": "x = 1\n\n\nfrom vtlab.stages import build\n",  # library → stages
            "index/seismic.py": "import vtlab.__main__\n",  # library → entry
        },
    )
    assert [p for p in problems if not p.startswith(("[cycle]", "[folder circle]"))] == [
        "[layer] vtlab/core/errors.py:1: vtlab.core.errors imports vtlab.models.encoder: upward import (foundations → "
        "library); foundations may import only foundations",
        "[layer] vtlab/data/text.py:4: vtlab.data.text imports vtlab.stages.build: upward import (library → stages); "
        "library may import only library, foundations",
        "[layer] vtlab/index/seismic.py:1: vtlab.index.seismic imports vtlab.__main__: upward import (library → "
        "entry); library may import only library, foundations",
    ]


def test_checker_refuses_a_stage_importing_another_stage(tmp_path):
    problems = _check(
        tmp_path,
        {
            "stages/evaluate.py": (
                "from vtlab.stages.train import encoder\nfrom vtlab.stages.build import encoder as e\n"
            ),
            "stages/pipeline.py": "from vtlab.stages import evaluate, train\n",  # the pipeline runs them all
        },
    )
    assert problems == [
        "[layer] vtlab/stages/evaluate.py:1: vtlab.stages.evaluate imports vtlab.stages.train: "
        "stage → stage; stages share code only through vtlab.stages.build"
    ]


def test_checker_reports_function_level_imports_outside_the_allowlist(tmp_path):
    problems = _check(
        tmp_path,
        {
            "models/encoder.py": """\
        from vtlab.core.errors import VtlabError


        class Model:
            def fit(self):
                from ..data import text
                import vtlab.core.errors as e
                return text, e
        """
        },
    )
    assert problems == [
        "[function-level import] vtlab/models/encoder.py:6: vtlab.models.encoder imports vtlab.data.text inside a "
        "function; import it at module level (break the cycle it hides), or add it to LAZY_IMPORTS with the reason",
        "[function-level import] vtlab/models/encoder.py:7: vtlab.models.encoder imports vtlab.core.errors inside a "
        "function; import it at module level (break the cycle it hides), or add it to LAZY_IMPORTS with the reason",
    ]
    assert check(tmp_path / "vtlab", allowed={}) == [  # the seismic import too, once off the allowlist
        "[function-level import] vtlab/index/__init__.py:2: vtlab.index imports vtlab.index.seismic inside a "
        "function; import it at module level (break the cycle it hides), or add it to LAZY_IMPORTS with the reason",
        *problems,
    ]


# The method's folders read as the paper: of vtlab/runtime/ they use the one policy interface, and they read no
# dataset (probe texts, default corpora and the like are passed in by config).
METHOD_FOLDERS = ("vtlab.models", "vtlab.vocab")
RUNTIME_INTERFACE = "vtlab.runtime.policy"
DATASET_MODULES = (
    "vtlab.data.boolq",
    "vtlab.data.olmo_eval",
    "vtlab.data.corpora",
    "vtlab.data.clean",
    "vtlab.data.hf",
    "vtlab.data.splits",
    "vtlab.data.collections",
    "vtlab.data.triplets",
    "vtlab.data.teacher",
)


def method_violations(edges: list[Import]) -> list[str]:
    out = []
    for e in edges:
        if folder(e.src) not in METHOD_FOLDERS:
            continue
        if folder(e.dst) == "vtlab.runtime" and e.dst != RUNTIME_INTERFACE:
            out.append(
                f"{e.where()}: {e.src} imports {e.dst}: the method uses vtlab/runtime/ through {RUNTIME_INTERFACE}"
            )
        if e.dst in DATASET_MODULES:
            out.append(f"{e.where()}: {e.src} imports the dataset module {e.dst}: pass the data in (config) instead")
    return out


def test_the_method_folders_use_one_runtime_interface_and_no_dataset():
    assert method_violations(imports(ROOT / "vtlab")) == []
    assert all((ROOT / "vtlab" / (m.split(".", 1)[1].replace(".", "/") + ".py")).is_file() for m in DATASET_MODULES)
