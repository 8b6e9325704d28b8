"""`opengate spm replay FILE`: the SPM's inspection run offline over a capture file, as Snort's
`-r` and Suricata's pcap mode do. Alerts come out as the EVE records the daemon writes inline.

One `Worker` takes every IP packet (IPv4 and IPv6) of the file, in file order, with the packet's
capture time as its clock (flow timeouts, alert timestamps): no dispatcher, no queue, no root.
The link layer is stripped here: Ethernet (with at most one 802.1Q tag) or raw IP (link types
101 and, for one family, 228 IPv4 and 229 IPv6); other frames (ARP, LLDP, a stack of VLAN tags)
are counted and skipped. With `engine="snort"`, Snort 3 reads the file itself (`snort -r`) with
the same rules, and its alert_json lines become the same records.

Not supported: the AV (off: an offline run has no clamd to ask), bypass (a flow a configuration
would bypass inline stops being inspected here too, and no record says so).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from opengate.errors import ConfigError
from spm.config import SpmConfig, load_config
from spm.eve import EveLog
from spm.ips.loader import build_detector
from spm.ips.snort import (
    parse_alert_json,
    snort_binary,
    snort_env,
    snort_lua,
    snort_pcap_command,
    snort_processing_seconds,
)
from spm.pcap import LINKTYPE_ETHERNET, CaptureReader, DamagedCapture, Frame
from spm.pool import event_dict
from spm.verdict import Alert
from spm.worker import Worker

LOG = logging.getLogger(__name__)

ENGINES = ("builtin", "snort")
LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6 = 101, 228, 229
EXPIRE_EVERY = 1.0  # seconds of capture time between flow-timeout checks

_ETH_IPV4, _ETH_IPV6, _ETH_VLAN, _ETH_QINQ = 0x0800, 0x86DD, 0x8100, 0x88A8
_ETHERTYPE_NAMES = {0x0806: "arp", 0x8035: "rarp", 0x88CC: "lldp"}
_RAW_VERSIONS = {LINKTYPE_RAW: (4, 6), LINKTYPE_IPV4: (4,), LINKTYPE_IPV6: (6,)}
_LINKTYPE_NAMES = {
    0: "NULL, BSD loopback",
    12: "RAW on OpenBSD",
    105: "IEEE802_11",
    113: "LINUX_SLL",
    127: "IEEE802_11_RADIOTAP",
    276: "LINUX_SLL2",
}


@dataclass(slots=True)
class ReplayStats:
    """What a replay read and found; `summary()` is the line `spm replay` prints."""

    path: str
    engine: str
    format: str = ""  # "pcap" | "pcapng"
    packets: int = 0  # frames read from the file
    ip: int = 0  # frames that held an IP packet (IPv4 or IPv6)
    ipv6: int = 0  # of those, IPv6
    inspected: int = 0  # of those, the packets the engine inspected (built-in engine)
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> frames or packets
    alerts: int = 0
    flows: int | None = None
    incomplete: str | None = None  # why the replay stopped before the end (damage, Snort)
    seconds: float | None = None  # inspection time, rules loaded (Snort: its own figure)

    def summary(self) -> str:
        head = f"replay {self.path} ({self.format or '?'}, engine {self.engine}): "
        head += f"{self.packets} packets read, "
        skipped = sum(self.skipped.values())
        reasons = ", ".join(f"{why} {n}" for why, n in sorted(self.skipped.items()))
        reasons = f" ({reasons})" if reasons else ""
        ipv6 = f" ({self.ipv6} IPv6)" if self.ipv6 else ""
        if self.engine == "snort":  # Snort reads the file: it also inspects what is not IP
            head += f"{self.ip} IP packets{ipv6}, {skipped} others{reasons}"
        else:
            head += f"{self.inspected} IP packets inspected{ipv6}, {skipped} skipped{reasons}"
        head += f", {self.alerts} alerts"
        head += f", {self.flows} flows" if self.flows is not None else ", flows not counted"
        return head


def replay_config(
    config: str | Path | None, rules: Sequence[str | Path], variables: Mapping[str, str]
) -> SpmConfig:
    """The configuration a replay runs with: `config`'s (or the defaults), plus `rules` and
    `variables` (which win over the configuration's); one worker, the AV off. Rule paths are
    made absolute (Snort resolves relative ones against its own directories)."""
    base = load_config(config) if config is not None else SpmConfig("replay", "replay", (0,))
    paths = tuple(str(Path(p).resolve()) for p in (*base.ips.rules, *rules))
    ips = dataclasses.replace(
        base.ips,
        enabled=base.ips.enabled or bool(rules),
        rules=paths,
        variables={**base.ips.variables, **variables},
    )
    if base.av.enabled:
        LOG.warning("replay: the AV is off (the configuration enables it)")
    av = dataclasses.replace(base.av, enabled=False)
    return dataclasses.replace(base, ips=ips, av=av, workers=1)


def ip_packet(frame: Frame, path: str) -> bytes | str:
    """The IP packet (IPv4 or IPv6) a frame carries, or why there is none (a skip reason). An
    unsupported link type raises ConfigError naming it."""
    data = frame.data
    if frame.linktype == LINKTYPE_ETHERNET:
        if len(data) < 14:
            return "short frame"
        ethertype, at = int.from_bytes(data[12:14], "big"), 14
        if ethertype == _ETH_VLAN:
            if len(data) < 18:
                return "short frame"
            ethertype, at = int.from_bytes(data[16:18], "big"), 18
            if ethertype in (_ETH_VLAN, _ETH_QINQ):
                return "vlan stack"
        elif ethertype == _ETH_QINQ:
            return "vlan stack"
        if ethertype not in (_ETH_IPV4, _ETH_IPV6):
            return _ETHERTYPE_NAMES.get(ethertype, f"ethertype 0x{ethertype:04x}")
        data = data[at:]
        versions: tuple[int, ...] = (4,) if ethertype == _ETH_IPV4 else (6,)
    elif frame.linktype in _RAW_VERSIONS:
        versions = _RAW_VERSIONS[frame.linktype]
    else:
        name = _LINKTYPE_NAMES.get(frame.linktype)
        raise ConfigError(
            f"link type {frame.linktype}{f' ({name})' if name else ''} is not supported; "
            f"replay reads Ethernet ({LINKTYPE_ETHERNET}) and raw IP "
            f"({LINKTYPE_RAW}, {LINKTYPE_IPV4}, {LINKTYPE_IPV6})",
            path=path,
        )
    version = data[0] >> 4 if data else 0
    if version not in versions:  # as the link layer said, or the packet is damaged
        return "not ip"
    return data


def replay(
    pcap: str | Path, cfg: SpmConfig, eve: EveLog, engine: str = "builtin", snort: str = ""
) -> ReplayStats:
    """Inspect `pcap` with `cfg`'s rules; alerts to `eve`. `snort`: the binary for
    `engine="snort"`. Raises ConfigError for a file that is not a capture or has a link type
    not supported; a damaged file is replayed up to the damage (`incomplete` says where)."""
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r} (one of {', '.join(ENGINES)})")
    with CaptureReader(pcap) as reader:  # a missing file or another format: fail before the rules
        return _replay(reader, cfg, eve, engine, snort)


def _replay(
    reader: CaptureReader, cfg: SpmConfig, eve: EveLog, engine: str, snort: str
) -> ReplayStats:
    rules = cfg.ips.rules if cfg.ips.enabled else ()
    if not rules:
        LOG.warning("replay: no rules (--rules or a configuration's ips.rules): nothing alerts")
    for rule_file in rules:
        if not Path(rule_file).is_file():
            raise ConfigError("no such rules file", path=rule_file)
    cfg = dataclasses.replace(cfg, ips=dataclasses.replace(cfg.ips, rules=rules))
    if engine == "snort":
        return _replay_snort(reader, cfg, eve, snort)
    return _replay_builtin(reader, cfg, eve)


def _read(
    reader: CaptureReader,
    stats: ReplayStats,
    handle: Callable[[bytes, float], None] | None = None,
) -> None:
    """Read the file into `stats` (frames, IP packets, skip reasons), giving each IP packet and
    its capture time to `handle`."""
    stats.format = reader.format
    try:
        for frame in reader:
            stats.packets += 1
            packet = ip_packet(frame, reader.path)
            if isinstance(packet, str):
                stats.skipped[packet] += 1
                continue
            stats.ip += 1
            stats.ipv6 += packet[0] >> 4 == 6
            if handle is not None:
                handle(packet, frame.ts)
    except DamagedCapture as exc:
        stats.incomplete = str(exc)


def _replay_builtin(reader: CaptureReader, cfg: SpmConfig, eve: EveLog) -> ReplayStats:
    stats = ReplayStats(reader.path, "builtin")
    worker = Worker(cfg, build_detector(cfg))
    next_expiry: float | None = None

    def handle(packet: bytes, ts: float) -> None:
        nonlocal next_expiry
        if next_expiry is None or ts >= next_expiry:
            worker.expire(ts)  # flows idle for limits.flow_timeout of capture time end
            next_expiry = ts + EXPIRE_EVERY
        worker.process(packet, now=ts)
        for event in worker.events:
            if isinstance(event, Alert):
                eve.alert(event_dict(event))
                stats.alerts += 1
        worker.events.clear()

    started = time.perf_counter()
    _read(reader, stats, handle)
    stats.seconds = time.perf_counter() - started
    c = worker.counters
    for error, n in c.decode_errors.items():
        stats.skipped[f"undecodable ({error})"] += n
    if c.fragments_uninspected:
        stats.skipped["fragment"] += c.fragments_uninspected
    stats.inspected = c.packets - sum(c.decode_errors.values()) - c.fragments_uninspected
    stats.flows = worker.flows.counters.created
    return stats


def find_snort_binary(
    which: Callable[[str], str | None] = shutil.which, prefixes: Sequence[str] | None = None
) -> str | None:
    """`snort` on PATH, else under $SNORT_PREFIX or /opt/snort (`spm.ips.snort.snort_binary`)."""
    return snort_binary(which, prefixes)


def _rollover_time(path: Path) -> int:
    digits = path.suffix[1:]
    return int(digits) if digits.isdigit() else 0


def _replay_snort(reader: CaptureReader, cfg: SpmConfig, eve: EveLog, binary: str) -> ReplayStats:
    stats = ReplayStats(reader.path, "snort")
    _read(reader, stats)  # the same checks and counts; Snort reads the file itself
    path = Path(reader.path)
    with tempfile.TemporaryDirectory(prefix="opengate-replay-") as tmp:
        log_dir = Path(tmp)
        lua = log_dir / "snort.lua"
        lua.write_text(snort_lua(cfg, log_dir))
        argv = snort_pcap_command(binary, lua, log_dir, path.resolve())
        LOG.info("replay: running %s", " ".join(argv))
        try:
            proc = subprocess.run(
                argv, env=snort_env(binary), capture_output=True, text=True, check=False
            )
        except OSError as exc:
            raise ConfigError(f"cannot run {binary}: {exc.strerror}") from None
        # alert_json.txt, and the files it rolled over into (alert_json.txt.<seconds>) first
        files = sorted(log_dir.glob("alert_json.txt.*"), key=_rollover_time)
        for name in [*files, log_dir / "alert_json.txt"]:
            if not name.exists():
                continue
            for line in name.read_text(encoding="utf-8", errors="replace").splitlines():
                alert = parse_alert_json(line, capture_time=True)
                if alert is None:
                    continue
                eve.alert({**alert, "source": "snort"})
                stats.alerts += 1
    stats.seconds = snort_processing_seconds(proc.stdout or "")
    if proc.returncode != 0 and stats.incomplete is None:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        stats.incomplete = f"snort exited with status {proc.returncode}" + (
            f": {lines[-1]}" if lines else ""
        )
    return stats
