"""The front door stays a front door: README.md is short, names the two commands, the main job and own-data use, and
every relative link in README.md and docs/ resolves (a moved or renamed doc fails here, not in a reader's browser)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import ROOT

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
README_MAX_BYTES = 15_000  # a page a researcher reads in five minutes; reference lives in docs/


def relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(page.read_text()) if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_readme_is_short() -> None:
    assert len(README.read_bytes()) <= README_MAX_BYTES


def test_readme_opens_with_the_two_commands_and_names_the_main_job_and_own_data() -> None:
    text = README.read_text()
    first_block = text.split("```")[1]
    assert "make demo" in first_block and "make test" in first_block
    for heading in ("## The main job", "## Use your own data", "## What a run writes", "## Documentation"):
        assert heading in text, heading


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_resolves(page: Path) -> None:
    missing = [t for t in relative_links(page) if not (page.parent / t.split("#")[0]).exists()]
    assert not missing, f"{page.relative_to(ROOT)}: links to nothing: {missing}"


def test_every_doc_is_linked_from_the_readme() -> None:
    linked = {(README.parent / t).resolve() for t in relative_links(README)}
    orphans = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not orphans, f"docs/ pages the README does not link: {orphans}"


def test_the_link_check_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("see [a](missing.md) and [b](https://example.org) and [c](#top)\n")
    assert relative_links(page) == ["missing.md"]
