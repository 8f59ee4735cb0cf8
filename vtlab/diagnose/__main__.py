"""`python -m vtlab.diagnose DIR [--out OUT]`: (re)render the comparison over every diagnose.json under DIR."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vtlab.core.errors import VtlabError
from vtlab.diagnose.report import collect, render


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vtlab.diagnose", description=__doc__)
    parser.add_argument("dir", type=Path, help="a directory holding diagnose jobs (e.g. a multirun sweep dir)")
    parser.add_argument("--out", type=Path, default=None, help="where to write the report (default: DIR/diagnose)")
    args = parser.parse_args(argv)
    try:
        results = collect(args.dir)
        if not results:
            raise VtlabError(f"{args.dir}: no diagnose.json found (run python -m vtlab stage=diagnose first)")
        paths = render(results, args.out or args.dir / "diagnose")
    except VtlabError as e:
        print(f"vtlab: error: {e}", file=sys.stderr)
        return 2
    print(f"{len(results)} candidates: {paths['markdown']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
