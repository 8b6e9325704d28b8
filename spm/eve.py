"""An EVE-style JSON log (one JSON object per line, as Suricata writes), on disk.

Event types: `alert` (IPS rule or AV signature), `bypass` (a flow offloaded), `stats` (the
SPM's counters, every `stats_interval` seconds), `spm` (start and stop). On disk, each record is
one write(2) of a whole line to a descriptor opened with O_APPEND, so that two processes can share
the file without interleaving lines (with Snort, the adapter writes Snort's alerts and the AV
beside it its own).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
from pathlib import Path
from typing import IO, Any

LOG = logging.getLogger(__name__)


def _timestamp(ts: float) -> str:
    dt = datetime.datetime.fromtimestamp(ts, tz=datetime.UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%f") + "+0000"


class EveLog:
    """Appends to the file at `path`; or, given `stream` (e.g. stdout, for `spm replay`), writes
    there and leaves it open on `close` (`path` then only names it in messages)."""

    def __init__(self, path: str | Path, spm_name: str, stream: IO[str] | None = None) -> None:
        self.path = Path(path)
        self.spm_name = spm_name
        self._fd: int | None = None
        if stream is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._file: IO[str] | None = stream
        self.written = 0

    def write(self, event_type: str, ts: float, **fields: Any) -> None:
        if self._file is None and self._fd is None:
            return
        record = {"timestamp": _timestamp(ts), "event_type": event_type, "spm": self.spm_name}
        record.update(fields)
        line = json.dumps(record, separators=(",", ":")) + "\n"
        try:
            if self._fd is not None:
                data = line.encode("utf-8")
                done = os.write(self._fd, data)  # O_APPEND: the whole line lands at the end
                while done < len(data):  # only when the disk is full, or on a signal
                    done += os.write(self._fd, data[done:])
            elif self._file is not None:
                self._file.write(line)
                self._file.flush()
            self.written += 1
        except OSError as exc:
            LOG.error("eve log %s: write failed (%s); EVE logging stops", self.path, exc)
            self.close()

    def alert(self, event: dict[str, Any]) -> None:
        """`event` is an alert as the workers report it (see `Alert.to_cpm`)."""
        flow = event["flow"]
        self.write(
            "alert",
            float(event["ts"]),
            community_id=event["community_id"],
            src_ip=flow["src"],
            src_port=flow["sport"],
            dest_ip=flow["dst"],
            dest_port=flow["dport"],
            proto=str(flow["proto"]).upper(),
            alert={
                "action": "blocked" if event["action"] in ("block", "drop") else "allowed",
                "gid": event["gid"],
                "signature_id": event["sid"],
                "rev": event["rev"],
                "signature": event["msg"],
                "category": event["classtype"],
                "severity": event.get("priority", 3),
                "source": event.get("source", "ips"),
            },
        )

    def bypass(self, event: dict[str, Any], ts: float) -> None:
        flow = event["flow"]
        self.write(
            "bypass",
            ts,
            community_id=event["community_id"],
            src_ip=flow["src"],
            src_port=flow["sport"],
            dest_ip=flow["dst"],
            dest_port=flow["dport"],
            proto=str(flow["proto"]).upper(),
            bypass={"clean_bytes": event["clean_bytes"], "class": event.get("flow_class", "")},
        )

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.flush()
            self._file = None  # a stream given to us stays open
