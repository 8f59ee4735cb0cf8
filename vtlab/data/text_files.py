"""A user's own texts from disk: a .txt file (one text per line), a .jsonl file (one JSON object per line, the text in
`field`; a non-empty "title" is prepended, so a BEIR corpus.jsonl reads as its documents), a BEIR directory (its
corpus.jsonl), or a directory of such files (read in name order). Errors name the config key, the file and the line."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from vtlab.core.errors import DataError, VtlabError
from vtlab.core.json_files import open_regular, parse_json


def iter_lines(path: Path) -> Iterator[tuple[str, str]]:
    """("path:lineno", line) for non-blank lines, streamed, decoded one by one so a bad byte is reported where it is.
    A UTF-8 byte order mark before the first line (as some Windows editors save) is not part of the data."""
    try:
        f = open_regular(path)
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from None
    with f:
        for lineno, raw in enumerate(f, start=1):
            where = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise DataError(f"{where}: not valid UTF-8 (byte {e.start} of the line)") from None
            if line.strip():
                yield where, line


def json_line(where: str, line: str) -> object:
    """One JSON value of a JSONL line; DataError naming `where` (vtlab.core.json_files.parse_json says when)."""
    return parse_json(where, line, DataError)


def _read_txt(path: Path, field: str, key: str) -> Iterator[str]:
    for where, line in iter_lines(path):
        if "\0" in line:  # UTF-16 or binary bytes that happen to be valid UTF-8: not texts to learn from
            raise DataError(f"{where}: a NUL character: not a line of text (a UTF-16 or binary file?); expected UTF-8")
        yield line


def _read_jsonl(path: Path, field: str, key: str) -> Iterator[str]:
    for where, line in iter_lines(path):
        obj = json_line(where, line)
        text = obj.get(field) if isinstance(obj, dict) else None
        if not isinstance(text, str):
            raise DataError(
                f"{where}: no string field '{field}' (expected one JSON object per line; set "
                f"{key.rpartition('.')[0] or key}.field to the key holding the text)"
            )
        title = obj.get("title")
        yield f"{title} {text}" if isinstance(title, str) and title.strip() else text


READERS: dict[str, Callable[[Path, str, str], Iterator[str]]] = {".txt": _read_txt, ".jsonl": _read_jsonl}


def text_files(path: str | Path, key: str) -> list[Path]:
    """The files a path names: itself, a BEIR directory's corpus.jsonl, or a directory's .txt/.jsonl files."""
    p = Path(path).expanduser()
    if p.is_dir():
        if (p / "corpus.jsonl").is_file():
            return [p / "corpus.jsonl"]
        files = sorted(f for f in p.iterdir() if f.suffix.lower() in READERS)
        if odd := next((f for f in files if not f.is_file()), None):  # a broken link: its texts would go missing
            raise VtlabError(
                f"{key}={str(path)!r}: {odd.name} is not a readable file (a broken link, a directory or a pipe): "
                "expected only .txt and .jsonl files to read, or remove it"
            )
        if not files:
            raise VtlabError(
                f"{key}={str(path)!r}: the directory has no corpus.jsonl and no {' or '.join(READERS)} files"
            )
        return files
    if p.suffix.lower() not in READERS:
        raise VtlabError(
            f"{key}={str(path)!r}: expected a {' or '.join(READERS)} file, a BEIR directory or a "
            "directory of such files"
        )
    if not p.is_file():
        raise VtlabError(f"{key}={str(path)!r} does not exist")
    return [p]


def iter_texts(path: str | Path, field: str = "text", key: str = "corpus.path") -> Iterator[str]:
    """Every non-blank text under `path`, in file order, streamed (corpora larger than memory are fine)."""
    for f in text_files(path, key):
        yield from (t for t in READERS[f.suffix.lower()](f, field, key) if t.strip())


def read_texts(path: str | Path, field: str = "text", key: str = "corpus.path") -> list[str]:
    """`iter_texts` as a list; DataError naming the path when it holds no text at all."""
    texts = list(iter_texts(path, field, key))
    if not texts:
        raise DataError(f"{key}={str(path)!r}: no text in it (every line is blank)")
    return texts
