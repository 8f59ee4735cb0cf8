"""Reading JSON that vtlab did not just write itself (a user's file, a run's record, a cache entry, an export's
manifest): only from a regular file, never waiting on a pipe, and every way it can be wrong (not JSON, a key twice in
one object, a number with more digits than Python converts, nesting deeper than it parses, the wrong kind of value at
its top) is one error naming the file."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from vtlab.core.errors import VtlabError


class JsonFileError(VtlabError, ValueError):
    """A JSON file that cannot be read as what it should hold (a ValueError too: its readers that count such a file
    as absent or unfinished catch ValueError)."""


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """`path` opened for reading in binary; OSError unless it is a regular file (or a link to one): a directory, or a
    named pipe, which would wait for a writer forever (opened without waiting, then refused)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file: a pipe, a socket or a device", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    obj = dict(pairs)
    if len(obj) < len(pairs):  # json.loads would keep the last value silently
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


def parse_json(where: str, text: str, error: type[VtlabError] = JsonFileError) -> Any:
    """One JSON value; `error` naming `where` (and the column) when it is not JSON, when an object holds a key twice,
    when a number has more digits than Python converts or the nesting is deeper than it parses. (json's own message
    may end in "at", as "Unterminated string starting at": the column follows it once, not "at at".)"""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as e:
        msg = e.msg.removesuffix(" at")
        raise error(f"{where}: invalid JSON ({msg} at column {e.colno})") from None
    except _DuplicateKey as e:
        raise error(f"{where}: key {e.key!r} appears twice in one JSON object (expected each key once)") from None
    except (ValueError, RecursionError) as e:  # an integer past sys.get_int_max_str_digits(); nesting too deep
        raise error(f"{where}: invalid JSON ({' '.join(str(e).split())[:200]})") from None


def what_is_wrong(error: Exception, path: str | os.PathLike[str]) -> str:
    """What is wrong with the file at `path`, from an `error` of this module's (whose message starts `<path>: `), for
    a caller whose own line names the file."""
    return str(error).removeprefix(f"{path}: ")


def read_json(
    path: str | os.PathLike[str], expected: type = dict, what: str = "", error: type[VtlabError] = JsonFileError
) -> Any:
    """The JSON value in the file at `path`, which must be a regular file in UTF-8 holding an `expected` (dict: an
    object; list: an array) at its top; else `error`, one line naming the file and what it should hold (`what`)."""
    path = Path(path)
    shown = f" ({what})" if what else ""
    try:
        with open_regular(path) as f:
            text = f.read().decode("utf-8")
    except OSError as e:
        raise error(f"{path}: cannot read{shown}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 (byte {e.start}){shown}") from None
    value = parse_json(str(path), text, error)
    if not isinstance(value, expected) or isinstance(value, bool):
        kind = {dict: "a JSON object", list: "a JSON array"}.get(expected, expected.__name__)
        raise error(f"{path}: expected {kind}{shown}, got {type(value).__name__}")
    return value
