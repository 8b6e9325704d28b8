"""`python -m docgen [--check]`: write the generated reference pages, or check they are fresh."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from docgen import DOCS, docs_dir, pages


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m docgen", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 listing the pages that are stale or missing",
    )
    args = parser.parse_args(argv)
    root = docs_dir()
    stale: list[str] = []
    for name, render in pages().items():
        path = root / name
        text = render()
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(f"{'missing' if current is None else 'stale'}: {DOCS}/{name}")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {DOCS}/{name}")
    if stale:
        print("\n".join(stale), file=sys.stderr)
        print("run `python -m docgen` (make docs) to regenerate them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
