"""The EVE log on disk: whole lines appended, even by two processes at once (with Snort, the
adapter and the AV beside it share the file)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from spm.eve import EveLog


def test_two_processes_append_whole_lines_to_one_file(tmp_path: Path) -> None:
    path = tmp_path / "eve.json"
    path.write_text('{"event_type":"before"}\n')  # appended to, not replaced
    filler = "x" * 20000  # larger than a stdio buffer
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            child = EveLog(path, "child")
            for i in range(300):
                child.write("stats", 0.0, n=i, filler=filler)
            child.close()
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    parent = EveLog(path, "parent")
    for i in range(300):
        parent.write("stats", 0.0, n=i, filler=filler)
    parent.close()
    _pid, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records[0] == {"event_type": "before"}
    for name in ("parent", "child"):
        assert [r["n"] for r in records[1:] if r["spm"] == name] == list(range(300))
