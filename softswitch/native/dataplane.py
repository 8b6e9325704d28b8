"""The native data plane: a loaded program compiled to C, behind the Python engine's interface.

`NativeDataplane` is what `softswitch.engine.Dataplane` is to the Python engine: `process(port,
frame)`, `lock`, `program`, `pre`, digests to a sink. The P4Runtime server keeps its Python tables
(the source of truth for reads and writes); each change is mirrored into the C tables as it happens
(`tables.Table.observer`), and the state that packets change lives in C and is seen from Python
in place: direct and indirect counters and registers as ctypes arrays over the C memory, meters
through `NativeMeter`, idle-timeout hits copied back by `sync_hit`. With `open_ports` the C side
also does the packet I/O (softswitch/native/og_io.c) and a Python thread takes what it queues for
the slow path: frames for ports without an interface (the CPU port) and digests.
"""

from __future__ import annotations

import contextlib
import ctypes as ct
import logging
import os
import select
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from softswitch import tables as tb
from softswitch.engine import Replication
from softswitch.externs import Meter
from softswitch.native.build import BuildError, build
from softswitch.native.cgen import CProgram, generate
from softswitch.native.cgen_expr import UnsupportedError
from softswitch.program import Program

LOG = logging.getLogger(__name__)

DigestSink = Callable[[int, tuple[int, ...]], None]
# a batch of digests, each (learn id, its fields encoded as a P4Runtime P4Data struct)
P4DataDigestSink = Callable[[list[tuple[int, bytes]]], None]
Emit = Callable[[int, bytes], None]
MAX_FRAME = 65536 + 1024
DIGEST_BATCH = 256  # digests taken from C per call
# The slow path's wait for its eventfd; the wake-up is what normally ends it (a safety net).
UPCALL_WAIT_SECONDS = 1.0
DIGEST_FIELDS = 32  # OG_DIGEST_MAX_FIELDS (og_rt.h)
DIGEST_P4DATA_MAX = 3 + DIGEST_FIELDS * 12  # OG_DIGEST_P4DATA_MAX (og_dp.c): one encoded sample


# What the port layer lost, reported by the upcall thread (a warning at most every
# LOSS_REPORT_SECONDS while it grows) and once more when the ports close.
LOSS_REPORT_SECONDS = 5.0


IO_STATS = ("rx_frames", "tx_frames", "tx_errors", "upcalls", "upcall_drops", "rx_ring_drops")


class IoStats(ct.Structure):
    """og_io_stats (og_io.h): IO_STATS, each a uint64_t."""

    _fields_ = [(name, ct.c_uint64) for name in IO_STATS]


class LossReport:
    """Counts of frames and digests the switch could not take, reported when they grow: a
    warning with the totals so far, at most once per `every` seconds (the last growth is
    reported by `final`)."""

    LOSSES = (
        ("rx_ring_drops", "frames the receive rings could not hold"),
        ("upcall_drops", "slow-path frames the upcall ring could not hold"),
        ("tx_errors", "frames not sent"),
        ("digest_drops", "digests the digest ring could not hold"),
    )

    def __init__(self, every: float = LOSS_REPORT_SECONDS) -> None:
        self.every = every
        self.reported: dict[str, int] = {}
        self.last = float("-inf")

    def text(self, counts: dict[str, int]) -> str:
        return ", ".join(f"{counts.get(k, 0)} {what}" for k, what in self.LOSSES)

    def check(self, counts: dict[str, int], now: float) -> str | None:
        """The warning to log now, or None (nothing new, or too soon)."""
        grown = any(counts.get(k, 0) > self.reported.get(k, 0) for k, _ in self.LOSSES)
        if not grown or now - self.last < self.every:
            return None
        self.reported, self.last = dict(counts), now
        return f"lost so far: {self.text(counts)}"

    def final(self, counts: dict[str, int]) -> str:
        """The summary for when the ports close."""
        return (
            f"port I/O: {counts.get('rx_frames', 0)} frames received, "
            f"{counts.get('tx_frames', 0)} sent; lost: {self.text(counts)}"
        )


class CEntry(ct.Structure):
    _fields_ = [
        ("packets", ct.c_uint64),
        ("bytes", ct.c_uint64),
        ("last_hit", ct.c_int64),
        ("meter", ct.c_void_p),
        ("action", ct.c_int32),
        ("nmembers", ct.c_uint32),
        ("stride", ct.c_uint32),
        ("is_group", ct.c_uint32),
        ("members", ct.c_void_p),
        ("ndata", ct.c_uint32),
        ("pad_", ct.c_uint32),
    ]


class CMeter(ct.Structure):
    _fields_ = [
        ("configured", ct.c_int32),
        ("packets", ct.c_int32),
        ("rate", ct.c_double * 2),
        ("burst", ct.c_int64 * 2),
        ("tokens", ct.c_int64 * 2),
        ("tokens_last", ct.c_int64 * 2),
        ("origin", ct.c_int64),
    ]


U64P = ct.POINTER(ct.c_uint64)
M64 = (1 << 64) - 1
LAST_HIT_OFFSET = CEntry.last_hit.offset
METER_OFFSET = CEntry.meter.offset


def _bind(lib: ct.CDLL) -> None:
    vp, u32, i32, i64 = ct.c_void_p, ct.c_uint32, ct.c_int32, ct.c_int64
    sig: dict[str, tuple[Any, list[Any]]] = {
        "og_dp_new": (vp, []),
        "og_dp_free": (None, [vp]),
        "og_dp_process": (i32, [vp, u32, ct.c_char_p, u32, ct.POINTER(u32)]),
        "og_dp_obuf": (vp, [vp]),
        "og_dp_io_open": (
            ct.c_int,
            [vp, u32, ct.POINTER(u32), ct.POINTER(ct.c_char_p), ct.c_char_p, u32],
        ),
        "og_dp_io": (vp, [vp]),
        "og_dp_io_close": (None, [vp]),
        "og_dp_pop_digests": (u32, [vp, ct.POINTER(u32), ct.POINTER(u32), U64P, u32]),
        "og_dp_pop_digests_p4data": (
            u32,
            [vp, ct.POINTER(u32), ct.POINTER(u32), ct.c_char_p, u32, u32],
        ),
        "og_dp_digest_drops": (ct.c_uint64, [vp]),
        "og_dp_push_digest": (None, [vp, u32, u32, U64P]),
        "og_dp_set_default": (None, [vp, u32, vp, vp]),
        "og_dp_register": (vp, [vp, u32]),
        "og_dp_counter": (vp, [vp, u32]),
        "og_dp_meter": (vp, [vp, u32]),
        "og_entry_new": (vp, [u32, i32]),
        "og_entry_free": (None, [vp]),
        "og_entry_set_members": (ct.c_int, [vp, vp, u32, u32, U64P, u32]),
        "og_meter_configure": (None, [vp, vp, ct.c_double, i64, ct.c_double, i64]),
        "og_meter_clear": (None, [vp, vp]),
        "og_meter_execute_api": (u32, [vp, vp, u32]),
        "og_entry_insert": (vp, [vp, u32, ct.c_char_p, u32, u32, U64P, u32]),
        "og_entry_remove": (ct.c_int, [vp, u32, vp, ct.c_char_p]),
        "og_dp_clear_registers": (None, [vp]),
        "og_dp_bench": (ct.c_uint64, [vp, u32, ct.c_char_p, ct.POINTER(u32), u32, u32]),
        "og_sizeof_entry": (u32, []),
        "og_sizeof_meter": (u32, []),
        "og_io_upcall_fd": (ct.c_int, [vp]),
        "og_io_pop_upcall": (i32, [vp, ct.POINTER(u32), ct.c_char_p, u32]),
        "og_io_send": (ct.c_int, [vp, u32, ct.c_char_p, u32]),
        "og_io_get_stats": (None, [vp, ct.POINTER(IoStats)]),
        "og_io_thread_id": (ct.c_int, [vp]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    if lib.og_sizeof_entry() != ct.sizeof(CEntry) or lib.og_sizeof_meter() != ct.sizeof(CMeter):
        raise BuildError("the C entry/meter layout differs from the Python one")


class CounterView:
    """A counter cell, [packets, bytes], in C memory (a snapshot once detached)."""

    __slots__ = ("_c", "_values")

    def __init__(self, addr: int) -> None:
        self._c: Any = (ct.c_uint64 * 2).from_address(addr)
        self._values = [0, 0]

    def __getitem__(self, i: int) -> int:
        if self._c is None:
            return self._values[i]
        return int(self._c[i])

    def __setitem__(self, i: int, value: int) -> None:
        if self._c is None:
            self._values[i] = value
        else:
            self._c[i] = value

    def __len__(self) -> int:
        return 2

    def __iter__(self) -> Iterator[int]:
        return iter((self[0], self[1]))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, CounterView)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(list(self))

    def detach(self) -> None:
        if self._c is not None:
            self._values = [int(self._c[0]), int(self._c[1])]
            self._c = None


class NativeMeter(Meter):
    """A meter whose state is a C `og_meter`: configured from Python, executed in C."""

    __slots__ = ("_addr", "_dp", "_lib")

    def __init__(self, lib: ct.CDLL, dp: int, addr: int, packets: bool) -> None:
        super().__init__(packets)
        self._lib = lib
        self._dp = dp
        self._addr: int | None = addr

    def configure(self, cir: int, cburst: int, pir: int, pburst: int) -> None:
        super().configure(cir, cburst, pir, pburst)
        if self._addr is not None:
            self._lib.og_meter_configure(
                self._dp, self._addr, float(cir), cburst, float(pir), pburst
            )

    def clear(self) -> None:
        super().clear()
        if self._addr is not None:
            self._lib.og_meter_clear(self._dp, self._addr)

    def execute(self, nbytes: int) -> int:
        if self._addr is None:
            return super().execute(nbytes)
        return int(self._lib.og_meter_execute_api(self._dp, self._addr, nbytes))

    def detach(self) -> None:
        self._addr = None


def _detach(e: tb.Entry) -> None:
    """Make an entry's counter and meter independent of the C memory about to be freed."""
    for obj in (e.ctr, e.meter):
        detach = getattr(obj, "detach", None)
        if detach is not None:
            detach()


class Mirror:
    """Keeps the C tables equal to the Python ones (softswitch.tables.Table.observer)."""

    def __init__(self, lib: ct.CDLL, dp: int, cprog: CProgram, program: Program) -> None:
        self.lib = lib
        self.dp = dp
        self.program = program
        self.c_of: dict[int, int] = {}  # id(entry) -> its C address
        self.blobs: dict[int, bytes] = {}  # id(entry) -> what og_entry_insert was given
        self.seen_hit: dict[int, int] = {}  # id(entry) -> C's last hit when last looked at
        self.defaults: dict[str, int] = {}
        self.index = cprog.tables  # table name -> its index in the C program
        self.stride: dict[str, int] = {}
        for name, t in program.tables.items():
            self.stride[name] = 1 + max((len(a.params) for a in t.actions.values()), default=0)
            t.observer = self
            if t.profile is not None:
                t.profile.observer = self
            for e in list(t.entries.values()):
                self.entry_added(t, e)
            if t.default is not None:
                self.default_set(t)

    # ---- entries
    def _default_entry(self, e: tb.Entry) -> int:
        """A C entry for a table's default action (a direct action: no member, counter, meter)."""
        addr: int = self.lib.og_entry_new(len(e.data), -1)
        if not addr:
            raise MemoryError("cannot allocate a native table entry")
        if e.action is not None:
            CEntry.from_address(addr).action = e.action.id
            data = (ct.c_uint64 * len(e.data)).from_address(addr + ct.sizeof(CEntry))
            data[:] = list(e.data)
        return addr

    def _members(self, t: tb.Table, e: tb.Entry) -> tuple[int, int, Any, int]:
        """An indirect table entry's members as og_entry_insert and og_entry_set_members take
        them: (count, stride, words, is_group)."""
        stride = self.stride[t.name]
        members: tuple[tb.Member, ...] = ()
        is_group = 0
        if e.member is not None:
            members = (e.member,)
        elif e.group is not None:
            members = e.group.expanded
            is_group = 1
        words = (ct.c_uint64 * max(1, len(members) * stride))()
        for i, m in enumerate(members):
            words[i * stride] = m.action.id
            for j, v in enumerate(m.data):
                words[i * stride + 1 + j] = v
        return len(members), stride, words, is_group

    def _blob(self, t: tb.Table, e: tb.Entry) -> bytes:
        """The entry as og_entry_insert reads it (og_dp.c): action, data, meter, counters,
        priority and key (bits, masks, range bounds) as 64-bit words."""
        n = len(t.kinds)
        bits, mask, lo, hi = [0] * n, [0] * n, [0] * n, [0] * n
        prio = e.priority if t.needs_priority else 0
        for i, (kind, width, spec) in enumerate(zip(t.kinds, t.widths, e.key, strict=True)):
            full = (1 << width) - 1
            if kind in ("exact", "valid"):
                bits[i], mask[i] = spec, full
            elif kind == "lpm":
                value, plen = spec
                m = full ^ ((1 << (width - plen)) - 1)
                bits[i], mask[i] = value & m, m
                if not t.needs_priority:
                    prio = plen
            elif kind == "ternary":
                bits[i], mask[i] = spec[0] & spec[1], spec[1]
            elif kind == "optional":
                if spec is not None:
                    bits[i], mask[i] = spec, full
            else:  # range
                lo[i], hi[i] = spec
        direct = e.action is not None and t.impl == "simple"
        action = e.action.id if direct and e.action is not None else -1
        data = e.data if direct else ()
        meter = -1 if t.direct_meter is None else int(t.direct_meter.packets)
        ctr = (e.ctr[0], e.ctr[1]) if e.ctr is not None else (0, 0)
        words = [action & M64, len(data), *data, meter & M64, e.last_hit & M64, *ctr]
        words += [prio & M64, n, *bits, *mask, *lo, *hi]
        return struct.pack(f"={len(words)}Q", *words)

    def entry_added(self, t: tb.Table, e: tb.Entry) -> None:
        blob = self._blob(t, e)
        members = self._members(t, e) if t.impl != "simple" else (0, 0, None, 0)
        addr = self.lib.og_entry_insert(self.dp, self.index[t.name], blob, *members)
        if not addr:
            raise MemoryError(f"table {t.name!r}: cannot add a native entry")
        if e.ctr is not None:
            e.ctr = CounterView(addr)  # type: ignore[assignment]
        if e.meter is not None:
            meter_addr = ct.c_void_p.from_address(addr + METER_OFFSET).value
            if meter_addr:
                native = NativeMeter(self.lib, self.dp, meter_addr, e.meter.packets)
                cfg = e.meter.config()
                if cfg is not None:
                    native.configure(*cfg)
                e.meter = native
        self.c_of[id(e)] = addr
        self.blobs[id(e)] = blob
        self.seen_hit[id(e)] = e.last_hit

    def entry_removed(self, t: tb.Table, e: tb.Entry) -> None:
        addr = self.c_of.pop(id(e), None)
        if addr is None:
            return
        blob = self.blobs.pop(id(e))
        self.seen_hit.pop(id(e), None)
        _detach(e)
        self.lib.og_entry_remove(self.dp, self.index[t.name], addr, blob)

    def cleared(self, t: tb.Table, entries: list[tb.Entry]) -> None:
        for e in entries:
            self.entry_removed(t, e)

    def default_set(self, t: tb.Table) -> None:
        addr = self._default_entry(t.default) if t.default is not None else 0
        old = self.defaults.pop(t.name, 0)
        self.lib.og_dp_set_default(self.dp, self.index[t.name], addr or None, old or None)
        if addr:
            self.defaults[t.name] = addr

    def profile_changed(self, profile: tb.ActionProfile) -> None:
        for t in self.program.tables.values():
            if t.profile is profile:
                for e in t.entries.values():
                    addr = self.c_of.get(id(e))
                    if addr is not None:
                        self.lib.og_entry_set_members(self.dp, addr, *self._members(t, e))

    def sync_hit(self, e: tb.Entry) -> None:
        """Copy a hit C saw since the last look into the Python entry (whose last_hit Python
        code may also set, as the P4Runtime write path does)."""
        addr = self.c_of.get(id(e))
        if addr is not None:
            hit = ct.c_int64.from_address(addr + LAST_HIT_OFFSET).value
            if hit != self.seen_hit.get(id(e)):
                self.seen_hit[id(e)] = hit
                e.last_hit = hit
                e.notified = False

    def release(self) -> None:
        for t in self.program.tables.values():
            t.observer = None
            if t.profile is not None:
                t.profile.observer = None
            for e in t.entries.values():
                _detach(e)
        for addr in self.c_of.values():
            self.lib.og_entry_free(addr)
        for addr in self.defaults.values():
            self.lib.og_entry_free(addr)
        self.c_of.clear()
        self.seen_hit.clear()
        self.defaults.clear()


class NativeDataplane:
    """A program run by its compiled C (see the module docstring)."""

    native = True

    def __init__(
        self, program: Program, lib: ct.CDLL, cprog: CProgram, digest_sink: DigestSink | None = None
    ) -> None:
        self.program = program
        self.lib = lib
        self.cprog = cprog
        self.digest_sink = digest_sink
        # when set, digests go here instead, encoded in C and a batch per call (the P4Runtime
        # server's sink: no Python per field)
        self.digest_p4data_sink: P4DataDigestSink | None = None
        # accepted, unused: programs with multicast or clones run on the Python engine
        self.pre = Replication()
        self.dropped_errors = 0
        dp = lib.og_dp_new()
        if not dp:
            raise MemoryError("cannot allocate the native data plane")
        self.dp: int = dp
        # Python's lock (as the Python engine's): P4Runtime writes, reads and timers one at a time;
        # the C mutex is taken inside C: by each packet, and by each call that changes C state.
        self.lock = threading.RLock()
        self._process_lock = threading.Lock()  # one Python caller of og_dp_process at a time
        self._out_port = ct.c_uint32()
        self._obuf = lib.og_dp_obuf(dp)
        # digests are taken DIGEST_BATCH at a time, by one thread at a time (the upcall thread
        # and the callers of process() both drain)
        self._drain_lock = threading.Lock()
        self._digest_ids = (ct.c_uint32 * DIGEST_BATCH)()
        self._digest_counts = (ct.c_uint32 * DIGEST_BATCH)()
        self._digest_values = (ct.c_uint64 * (DIGEST_BATCH * DIGEST_FIELDS))()
        self._digest_bytes = ct.create_string_buffer(DIGEST_BATCH * DIGEST_P4DATA_MAX)
        self._io = 0
        self._io_thread: threading.Thread | None = None
        self._io_stop: tuple[int, int] | None = None
        self.emit: Emit | None = None
        with self.lock:
            self._bind_externs()
            self.mirror = Mirror(lib, dp, cprog, program)

    def _bind_externs(self) -> None:
        prog, lib, dp = self.program, self.lib, self.dp
        for name, arr in prog.registers.items():
            addr = lib.og_dp_register(dp, self.cprog.registers[name])
            cells = (ct.c_uint64 * arr.size).from_address(addr)
            for i, v in enumerate(arr.cells):
                cells[i] = v
            arr.cells = cells  # type: ignore[assignment]
        for name, ctr in prog.counters.items():
            if ctr.is_direct:
                continue
            addr = lib.og_dp_counter(dp, self.cprog.counters[name])
            views = [CounterView(addr + 16 * i) for i in range(ctr.size)]
            for view, (pk, by) in zip(views, ctr.cells, strict=True):
                view[0], view[1] = pk, by
            ctr.cells = views  # type: ignore[assignment]
        for name, mtr in prog.meters.items():
            if mtr.is_direct:
                continue
            base = lib.og_dp_meter(dp, self.cprog.meters[name])
            size = ct.sizeof(CMeter)
            natives: list[Meter] = []
            for i, old in enumerate(mtr.meters):
                nm = NativeMeter(lib, dp, base + i * size, mtr.packets)
                cfg = old.config()
                if cfg is not None:
                    nm.configure(*cfg)
                natives.append(nm)
            mtr.meters = natives

    # ---- packets
    def process(self, port: int, frame: bytes) -> list[tuple[int, bytes]]:
        with self._process_lock:  # the output buffer is shared; the C call takes the C mutex
            n = self.lib.og_dp_process(self.dp, port, frame, len(frame), ct.byref(self._out_port))
            out = [(int(self._out_port.value), ct.string_at(self._obuf, n))] if n >= 0 else []
        self.drain_digests()
        return out

    def drain_digests(self) -> None:
        if self.digest_p4data_sink is not None:
            self._drain_p4data(self.digest_p4data_sink)
            return
        sink = self.digest_sink
        ids, counts, values = self._digest_ids, self._digest_counts, self._digest_values
        with self._drain_lock:
            while True:
                k = self.lib.og_dp_pop_digests(self.dp, ids, counts, values, DIGEST_BATCH)
                if sink is not None:
                    for i in range(k):
                        start = i * DIGEST_FIELDS
                        sink(ids[i], tuple(values[start : start + counts[i]]))
                if k < DIGEST_BATCH:
                    return

    def _drain_p4data(self, sink: P4DataDigestSink) -> None:
        ids, ends, buf = self._digest_ids, self._digest_counts, self._digest_bytes
        with self._drain_lock:
            while True:
                k = self.lib.og_dp_pop_digests_p4data(
                    self.dp, ids, ends, buf, len(buf), DIGEST_BATCH
                )
                if k:
                    raw = ct.string_at(buf, ends[k - 1])
                    start, batch = 0, []
                    for i in range(k):
                        end = ends[i]
                        batch.append((ids[i], raw[start:end]))
                        start = end
                    sink(batch)
                if k < DIGEST_BATCH:
                    return

    def sync_hit(self, entry: tb.Entry) -> None:
        self.mirror.sync_hit(entry)

    def clear_registers(self) -> None:
        """Every register cell to 0 (benchmarks: the data plane's sessions forgotten)."""
        self.lib.og_dp_clear_registers(self.dp)

    def run_batch(self, port: int, frames: list[bytes], rounds: int) -> int:
        """Run `frames` `rounds` times through the pipeline in one C loop (no Python per
        packet); returns how many were output. Digests they make are drained after."""
        lens = (ct.c_uint32 * len(frames))(*(len(f) for f in frames))
        with self._process_lock:
            out = self.lib.og_dp_bench(self.dp, port, b"".join(frames), lens, len(frames), rounds)
        self.drain_digests()
        return int(out)

    # ---- ports in C
    def open_ports(self, interfaces: dict[int, str], emit: Emit, nice: int = 0) -> None:
        """Serve these interfaces from the C polling thread; `emit(port, frame)` receives what it
        queues for the slow path (frames for ports without an interface). `nice`: the polling
        thread's nice value, if not 0 (a lower one needs CAP_SYS_NICE; without it the thread
        keeps the process's, with a warning)."""
        n = len(interfaces)
        nums = (ct.c_uint32 * n)(*interfaces.keys())
        names = (ct.c_char_p * n)(*(name.encode() for name in interfaces.values()))
        err = ct.create_string_buffer(512)
        if self.lib.og_dp_io_open(self.dp, n, nums, names, err, len(err)) != 0:
            raise OSError(err.value.decode(errors="replace"))
        self._io = self.lib.og_dp_io(self.dp)
        self.emit = emit
        if nice:
            self._prioritise_io(nice)
        r, w = os.pipe()
        self._io_stop = (r, w)
        self._io_thread = threading.Thread(target=self._upcalls, name="native-upcalls", daemon=True)
        self._io_thread.start()

    def _prioritise_io(self, nice: int) -> None:
        tid = int(self.lib.og_io_thread_id(self._io))
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
        except OSError as exc:
            LOG.warning("packet I/O thread keeps its priority (nice %d: %s)", nice, exc.strerror)
            return
        LOG.info("packet I/O thread %d at nice %d", tid, nice)

    def _upcalls(self) -> None:
        assert self._io_stop is not None
        fd = self.lib.og_io_upcall_fd(self._io)
        stop_r = self._io_stop[0]
        buf = ct.create_string_buffer(MAX_FRAME)
        port = ct.c_uint32()
        report = LossReport()
        while True:
            ready, _, _ = select.select([fd, stop_r], [], [], UPCALL_WAIT_SECONDS)
            if stop_r in ready:
                return
            self.serve_slow_path(buf, port)
            warning = report.check(self.io_stats(), time.monotonic())
            if warning is not None:
                LOG.warning("%s", warning)

    def serve_slow_path(self, buf: ct.Array[ct.c_char], port: ct.c_uint32) -> None:
        """One wake-up's work: every slow-path frame, then every digest, in that order. Both
        rings wake the one eventfd, which og_io_pop_upcall clears once the frames' ring is
        empty. A digest pushed before that clear has had its wake-up eaten: the drain after it
        takes it; one pushed after the drain finds the digest ring empty and writes the eventfd
        again. (Digests first lost such wake-ups: the ring was then drained only by the wait's
        1 s timeout, so above 65,536 digests a second it overflowed.)"""
        while True:
            n = self.lib.og_io_pop_upcall(self._io, ct.byref(port), buf, MAX_FRAME)
            if n < 0:
                break
            if self.emit is not None:
                try:
                    self.emit(int(port.value), buf.raw[:n])
                except Exception:
                    LOG.exception("slow-path frame for port %d", port.value)
        self.drain_digests()

    def io_stats(self) -> dict[str, int]:
        """The port layer's counters (og_io_stats) and the digests lost, since the ports
        opened."""
        out = IoStats()
        if self._io:
            self.lib.og_io_get_stats(self._io, ct.byref(out))
        counts = {name: int(getattr(out, name)) for name in IO_STATS}
        counts["digest_drops"] = int(self.lib.og_dp_digest_drops(self.dp))
        return counts

    def transmit(self, port: int, frame: bytes) -> None:
        """Send on a port served by C (when `owns_ports`)."""
        rc = self.lib.og_io_send(self._io, port, frame, len(frame))
        if rc < -1:
            LOG.debug("port %d: send failed: %s", port, os.strerror(-rc))

    @property
    def owns_ports(self) -> bool:
        return bool(self._io)

    def close(self) -> None:
        """Stop the polling thread and release the C state (the Python tables keep their
        entries, with counters and meters detached from C)."""
        if self._io_stop is not None:
            with contextlib.suppress(OSError):
                os.write(self._io_stop[1], b"x")
            if self._io_thread is not None:
                self._io_thread.join(timeout=5)
            for fd in self._io_stop:
                os.close(fd)
            self._io_stop = None
        if self.dp:
            if self._io:
                LOG.info("%s", LossReport().final(self.io_stats()))
            self.lib.og_dp_io_close(self.dp)
            self._io = 0
            with self.lock:
                self.mirror.release()
            self.lib.og_dp_free(self.dp)
            self.dp = 0


_LIBS: dict[str, ct.CDLL] = {}


def load_native(program: Program, digest_sink: DigestSink | None = None) -> NativeDataplane:
    """The program's native data plane; raises UnsupportedError or BuildError saying why not."""
    cprog = generate(program)
    path = str(build(cprog.source))
    lib = _LIBS.get(path)
    if lib is None:
        lib = ct.CDLL(path)
        _bind(lib)
        _LIBS[path] = lib
    return NativeDataplane(program, lib, cprog, digest_sink)


__all__ = ["BuildError", "NativeDataplane", "UnsupportedError", "load_native"]
