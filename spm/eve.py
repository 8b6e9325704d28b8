"""An EVE-style JSON log (one JSON object per line, as Suricata writes), on disk.

Event types: `alert` (IPS rule or AV signature), `bypass` (a flow offloaded), `stats` (the
SPM's counters, every `stats_interval` seconds), `spm` (start and stop). On disk, each record is
one write(2) of a whole line to a descriptor opened with O_APPEND, so that two processes can share
the file without interleaving lines (with Snort, the adapter writes Snort's alerts and the AV
beside it its own).

The 5-tuple is written as Suricata writes it: `src_ip`/`dest_ip` (an IPv6 address in full, eight
groups of four hex digits, as Suricata prints it), `proto` by Suricata's names (TCP, UDP, ICMP,
IPv6-ICMP, SCTP), `ip_v` (4 or 6); ports for TCP, UDP and SCTP, `icmp_type`/`icmp_code` for ICMP
and ICMPv6; and the flow's `community_id`.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import logging
import os
from pathlib import Path
from typing import IO, Any

LOG = logging.getLogger(__name__)


_PROTO_NAMES = {
    "tcp": "TCP",
    "udp": "UDP",
    "icmp": "ICMP",
    "ipv6-icmp": "IPv6-ICMP",
    "sctp": "SCTP",
}
_ICMP = frozenset({"icmp", "ipv6-icmp"})


def eve_address(text: str) -> str:
    """An address as Suricata's EVE writes it: IPv4 dotted, IPv6 in full ("2001:0db8:0000:...");
    text that is no address is left as it is."""
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return text
    return addr.exploded if addr.version == 6 else str(addr)


def five_tuple(flow: dict[str, Any]) -> dict[str, Any]:
    """The EVE fields of a flow as the workers report it (`FlowInfo.as_dict`)."""
    proto = str(flow["proto"]).lower()
    src, dst = str(flow["src"]), str(flow["dst"])
    out: dict[str, Any] = {"src_ip": eve_address(src)}
    icmp = proto in _ICMP
    if not icmp:
        out["src_port"] = flow["sport"]
    out["dest_ip"] = eve_address(dst)
    if not icmp:
        out["dest_port"] = flow["dport"]
    out["proto"] = _PROTO_NAMES.get(proto, proto.upper())
    out["ip_v"] = 6 if ":" in src else 4
    if icmp:
        out["icmp_type"], out["icmp_code"] = flow["sport"], flow["dport"]
    return out


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
        self.write(
            "alert",
            float(event["ts"]),
            community_id=event["community_id"],
            **five_tuple(event["flow"]),
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
        self.write(
            "bypass",
            ts,
            community_id=event["community_id"],
            **five_tuple(event["flow"]),
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
