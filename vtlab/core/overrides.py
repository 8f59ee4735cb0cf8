"""A value written into a Hydra override, as the override grammar reads it back, and a command line as a shell reads
it back: a run or sweep directory, a path in a list (`reuse_runs=[...]`, `hydra.searchpath=[...]`). Unquoted, a `,`
makes a sweep, a `=` or a space does not parse, a `'` ends the string; every command vtlab runs or prints for the user
to copy builds its paths here."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable
from typing import Any

_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./-]*/[A-Za-z0-9_./-]*")  # a path the grammar reads as itself, unquoted
_DOUBLE_QUOTABLE = re.compile(r'[^"$`\\!]*')  # what a shell keeps as it is between double quotes


def quoted(value: str | os.PathLike[str]) -> str:
    """`value` as one quoted string of Hydra's override grammar: a quote is escaped, and so are the backslashes before
    a quote or the closing one."""
    text = os.fspath(value)
    return "'" + re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), text) + "'"


def override(key: str, value: str | os.PathLike[str]) -> str:
    """`key=value`, the value as it is where it is a plain path (`hydra.run.dir=outputs/runs/x`), else quoted
    (`hydra.run.dir='outputs/a,b'`)."""
    text = os.fspath(value)
    return f"{key}={text if _PLAIN_PATH.fullmatch(text) else quoted(text)}"


def quoted_list(values: Iterable[str | os.PathLike[str]]) -> str:
    """A list value of quoted strings (`['a,b','c']`)."""
    return "[" + ",".join(quoted(v) for v in values) + "]"


def shell_line(argv: Iterable[str]) -> str:
    """`argv` as one line a POSIX shell splits back into it: a word as it is where the shell keeps it, in double quotes
    where it holds a `'` but nothing a shell expands there (`"reuse_runs=['/a b']"`), else shlex's single quotes."""
    words = []
    for arg in argv:
        plain = shlex.quote(arg)
        words.append(plain if plain == arg or "'" not in arg or not _DOUBLE_QUOTABLE.fullmatch(arg) else f'"{arg}"')
    return " ".join(words)


def key(override_text: str) -> str:
    """The key of one override: `+experiment=x` -> `experiment`, `~a.b` -> `a.b` (a Hydra key never holds `=`)."""
    return override_text.split("=", 1)[0].lstrip("+~")


def value(override_text: str) -> Any:
    """The value of one `key=value` override as Hydra reads it: `6e-05` is a float (YAML 1.1, which PyYAML follows,
    reads it as a string), `null` None, `[a,b]` a list, a quoted value the string inside."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_override(override_text).value()
