"""An EVE-style JSON log (one JSON object per line, as Suricata writes), on disk.

Event types: `alert` (IPS rule or AV signature), `bypass` (a flow offloaded), `stats` (the
SPM's counters, every `stats_interval` seconds), `spm` (start and stop). Written by the
dispatcher process only, so lines never interleave.
"""

from __future__ import annotations

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
        self._owned = stream is None
        if stream is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            stream = self.path.open("a", encoding="utf-8")
        self._file: IO[str] | None = stream
        self.written = 0

    def write(self, event_type: str, ts: float, **fields: Any) -> None:
        if self._file is None:
            return
        record = {"timestamp": _timestamp(ts), "event_type": event_type, "spm": self.spm_name}
        record.update(fields)
        try:
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
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
        if self._file is not None:
            try:
                self._file.flush()
                if self._owned:
                    os.fsync(self._file.fileno())
            except OSError:
                pass
            if self._owned:
                self._file.close()
            self._file = None
