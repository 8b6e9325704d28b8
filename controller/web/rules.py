"""An alert's rule text, for the console: looked up by sid in the policy's IDS rules file and in
the rule files the SPMs run (given to the controller with --rules-file), indexed on first use
and again when a file changes."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

_SID = re.compile(r"[(;]\s*sid\s*:\s*(\d+)\s*;")


@dataclass(frozen=True, slots=True)
class RuleText:
    sid: int
    path: str
    line: int
    text: str


def index_file(path: Path) -> dict[int, RuleText]:
    out: dict[int, RuleText] = {}
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _SID.search(stripped)
        if match is not None:
            sid = int(match.group(1))
            out.setdefault(sid, RuleText(sid, str(path), number, stripped))
    return out


class RuleIndex:
    def __init__(self, files: Callable[[], Sequence[Path]]) -> None:
        self._files = files
        self._indexes: dict[Path, tuple[float, dict[int, RuleText]]] = {}
        self._lock = threading.Lock()

    def find(self, sid: int) -> RuleText | None:
        """The first rule with this sid, in the order of the files."""
        with self._lock:
            for path in self._files():
                try:
                    mtime = path.stat().st_mtime
                except OSError:
                    continue
                cached = self._indexes.get(path)
                if cached is None or cached[0] != mtime:
                    cached = (mtime, index_file(path))
                    self._indexes[path] = cached
                found = cached[1].get(sid)
                if found is not None:
                    return found
        return None
