"""The v1model packet walk: parser, ingress, packet replication, egress, deparser.

`Dataplane.process(port, frame)` runs one received frame to completion (including clones,
resubmits, recirculations and multicast copies) and returns the frames to transmit. It follows
simple_switch's semantics (targets/simple_switch/simple_switch.cpp in behavioral-model): drop port
511, egress_spec reset in egress, clone/resubmit/recirculate with field lists, digests at the end
of ingress. Nothing here depends on the P4 program: that is all in the compiled `Program`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from softswitch.codegen_base import DROP_PORT
from softswitch.errors import AssertionFailed, ParserError
from softswitch.program import Program

LOG = logging.getLogger(__name__)

NORMAL, INGRESS_CLONE, EGRESS_CLONE, COALESCED, RECIRC, REPLICATION, RESUBMIT = range(7)
MAX_LOOPS = 16  # resubmits + recirculations allowed for one received frame


class Packet:
    """Per-packet state other than the PHV."""

    __slots__ = (
        "clone_fl",
        "clone_sid",
        "data",
        "exit",
        "ilen",
        "learn_id",
        "length",
        "pos",
        "recirc_fl",
        "resubmit_fl",
        "trunc",
    )

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.ilen = len(data)
        self.length = len(data)
        self.exit = False
        self.clone_sid: int | None = None
        self.clone_fl = 0
        self.resubmit_fl: int | None = None
        self.recirc_fl: int | None = None
        self.learn_id = 0
        self.trunc = 0

    def copy(self) -> Packet:
        q = Packet.__new__(Packet)
        q.data = self.data
        q.pos = self.pos
        q.ilen = self.ilen
        q.length = self.length
        q.exit = False
        q.clone_sid = None
        q.clone_fl = 0
        q.resubmit_fl = None
        q.recirc_fl = None
        q.learn_id = 0
        q.trunc = 0
        return q


@dataclass(slots=True)
class Replica:
    port: int
    rid: int


@dataclass(slots=True)
class CloneSession:
    replicas: list[Replica]
    class_of_service: int = 0
    truncate: int = 0


@dataclass(slots=True)
class Replication:
    """The packet replication engine's configuration: multicast groups and clone sessions."""

    groups: dict[int, list[Replica]] = field(default_factory=dict)
    clones: dict[int, CloneSession] = field(default_factory=dict)


DigestSink = Callable[[int, tuple[int, ...]], None]


class Dataplane:
    def __init__(self, program: Program, digest_sink: DigestSink | None = None) -> None:
        self.program = program
        self.pre = Replication()
        self.digest_sink = digest_sink
        self.lock = threading.RLock()
        self.start_ns = time.monotonic_ns()
        self.dropped_errors = 0
        self.fallback_reason = ""  # why the native path does not run this program, if it was asked
        std = program.std
        self._template = program.layout.template
        self._meta_ranges = program.layout.metadata_slots
        self._s_in = std["ingress_port"].slot
        self._s_espec = std["egress_spec"].slot
        self._espec_mask = std["egress_spec"].mask
        self._s_eport = std["egress_port"].slot
        self._s_itype = std["instance_type"].slot
        self._s_len = std["packet_length"].slot if "packet_length" in std else -1
        self._s_mcast = std["mcast_grp"].slot if "mcast_grp" in std else -1
        self._s_rid = std["egress_rid"].slot if "egress_rid" in std else -1
        self._s_its = (
            std["ingress_global_timestamp"].slot if "ingress_global_timestamp" in std else -1
        )
        self._s_ets = (
            std["egress_global_timestamp"].slot if "egress_global_timestamp" in std else -1
        )
        self._s_perr = program.parser_error_slot
        self._s_cerr = program.checksum_error_slot

    native = False
    owns_ports = False

    def sync_hit(self, entry: Any) -> None:
        """An entry's last hit is kept in place (the native data plane copies it back)."""

    def close(self) -> None:
        """Nothing to release (the native data plane frees its C state)."""

    # ------------------------------------------------------------------ parsing
    def _parse(self, p: Packet, f: list[int]) -> None:
        st = self.program.parser_start
        try:
            while st is not None:
                st = st(p, f)
        except ParserError as err:
            if self._s_perr >= 0:
                f[self._s_perr] = err.code
        if not self.program.verify_checksums(p, f) and self._s_cerr >= 0:
            f[self._s_cerr] = 1

    def _reset_metadata(self, f: list[int]) -> None:
        t = self._template
        for a, b in self._meta_ranges:
            f[a:b] = t[a:b]

    def _copy_field_list(self, dst: list[int], src: list[int], fl_id: int) -> None:
        for slot in self.program.field_lists.get(fl_id, ()):
            dst[slot] = src[slot]

    # ------------------------------------------------------------------ the walk
    def process(self, port: int, frame: bytes) -> list[tuple[int, bytes]]:
        """Run one received frame through the switch; returns (port, frame) to transmit."""
        out: list[tuple[int, bytes]] = []
        with self.lock:
            try:
                f = self._template[:]
                f[self._s_in] = port
                if self._s_len >= 0:
                    f[self._s_len] = len(frame)
                self._ingress(frame, f, out, 0)
            except Exception:
                self.dropped_errors += 1
                LOG.exception("packet from port %d dropped: error while processing it", port)
        return out

    def _ingress(
        self, frame: bytes, f: list[int], out: list[tuple[int, bytes]], loops: int
    ) -> None:
        prog = self.program
        p = Packet(frame)
        if self._s_its >= 0:
            f[self._s_its] = (time.monotonic_ns() - self.start_ns) // 1000
        in_port = f[self._s_in]
        self._parse(p, f)
        node = prog.ingress.init
        try:
            while node is not None:
                node = node(p, f)
        except AssertionFailed:
            LOG.error("assertion failed in ingress; packet dropped")
            return
        p.exit = False
        egress_spec = f[self._s_espec]
        if p.clone_sid is not None:
            session = self.pre.clones.get(p.clone_sid)
            p.clone_sid = None
            if session is not None:
                q = Packet(frame)
                g = self._template[:]
                g[self._s_in] = in_port
                self._parse(q, g)
                self._reset_metadata(g)
                self._copy_field_list(g, f, p.clone_fl)
                g[self._s_itype] = INGRESS_CLONE
                q.length = len(frame)
                self._clone_out(q, g, session, out, loops)
        if p.learn_id > 0 and self.digest_sink is not None:
            ll = prog.learn_lists.get(p.learn_id)
            if ll is not None:
                self.digest_sink(p.learn_id, tuple(f[fl.slot] for fl in ll[1]))
        if p.resubmit_fl is not None:
            if loops >= MAX_LOOPS:
                LOG.warning("resubmit loop limit reached; packet dropped")
                return
            g = self._template[:]
            self._copy_field_list(g, f, p.resubmit_fl)
            g[self._s_itype] = RESUBMIT
            if self._s_len >= 0:
                g[self._s_len] = len(frame)
            self._ingress(frame, g, out, loops + 1)
            return
        mgid = f[self._s_mcast] if self._s_mcast >= 0 else 0
        if mgid:
            f[self._s_itype] = REPLICATION
            self._multicast(p, f, mgid, out, loops)
            return
        if egress_spec == DROP_PORT:
            return
        f[self._s_itype] = NORMAL
        self._egress(p, f, egress_spec, out, loops)

    def _multicast(
        self, p: Packet, f: list[int], mgid: int, out: list[tuple[int, bytes]], loops: int
    ) -> None:
        for rep in self.pre.groups.get(mgid, ()):
            g = f[:]
            if self._s_rid >= 0:
                g[self._s_rid] = rep.rid
            self._egress(p.copy(), g, rep.port, out, loops)

    def _clone_out(
        self,
        q: Packet,
        g: list[int],
        session: CloneSession,
        out: list[tuple[int, bytes]],
        loops: int,
    ) -> None:
        if session.truncate:
            q.trunc = session.truncate
        for rep in session.replicas:
            h = g[:]
            if self._s_rid >= 0:
                h[self._s_rid] = rep.rid
            c = q.copy()
            c.trunc = q.trunc
            self._egress(c, h, rep.port, out, loops)

    def _egress(
        self, p: Packet, f: list[int], port: int, out: list[tuple[int, bytes]], loops: int
    ) -> None:
        prog = self.program
        if self._s_ets >= 0:
            f[self._s_ets] = (time.monotonic_ns() - self.start_ns) // 1000
        f[self._s_eport] = port
        f[self._s_espec] = (DROP_PORT + 1) & self._espec_mask
        if self._s_len >= 0:
            f[self._s_len] = p.length
        node = prog.egress.init
        try:
            while node is not None:
                node = node(p, f)
        except AssertionFailed:
            LOG.error("assertion failed in egress; packet dropped")
            return
        if p.clone_sid is not None:
            session = self.pre.clones.get(p.clone_sid)
            p.clone_sid = None
            if session is not None:
                g = self._template[:]
                g[: len(f)] = f
                self._reset_metadata(g)
                self._copy_field_list(g, f, p.clone_fl)
                g[self._s_itype] = EGRESS_CLONE
                q = p.copy()
                self._clone_out(q, g, session, out, loops)
        if f[self._s_espec] == DROP_PORT:
            return
        prog.update_checksums(p, f)
        frame = prog.deparse(p, f) + p.data[p.pos :]
        trunc = p.trunc
        if trunc and trunc < len(frame):
            frame = frame[:trunc]
        if p.recirc_fl is not None:
            if loops >= MAX_LOOPS:
                LOG.warning("recirculation loop limit reached; packet dropped")
                return
            g = self._template[:]
            self._copy_field_list(g, f, p.recirc_fl)
            g[self._s_itype] = RECIRC
            if self._s_len >= 0:
                g[self._s_len] = len(frame)
            self._ingress(frame, g, out, loops + 1)
            return
        out.append((port, frame))


def phv_value(program: Program, f: list[int], dotted: str) -> Any:
    """A field's value by "header.field" (tests and debugging)."""
    fld = program.layout.find_field(dotted)
    if fld is None:
        raise KeyError(dotted)
    return f[fld.slot]
