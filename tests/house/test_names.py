"""`describe` means one thing in vtlab: a method that describes its object in one line of text, for a log line.
Functions that do something else are named for what they return: `runs.status.error_line` (the one-line error behind
an exception), `diagnose.corpus.corpus_name` (the corpus's name in the report), `export.sentence_transformers.
encoder_settings` (the settings an export records)."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import ROOT

from vtlab.core.errors import DataError
from vtlab.diagnose.corpus import corpus_name
from vtlab.runs.status import error_line


def test_every_describe_is_a_method_returning_a_line_of_text() -> None:
    wrong = []
    for path in sorted(Path(ROOT, "vtlab").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        methods = {id(f) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for f in c.body}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "describe":
                returns = ast.unparse(node.returns) if node.returns else None
                if id(node) not in methods or returns != "str":
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} (returns {returns})")
    assert wrong == []


def test_the_renamed_functions_say_what_they_return() -> None:
    assert error_line(RuntimeError("boom\nsecond line")) == "RuntimeError: boom second line"
    assert error_line(DataError("bad.jsonl:3: no 'text'")) == "bad.jsonl:3: no 'text'"
    assert corpus_name({"path": "/data/docs.jsonl"}) == "/data/docs.jsonl"
    assert corpus_name({"from_data": True}) == "the `data` config's training documents"
    assert corpus_name({}) == "BoolQ passages (train + validation)"
