"""The inputs of the native fuzzers: the OpenGate program compiled to C (softswitch/native/cgen.py)
and a C header with what the harness (fuzz/native/og_fuzz.c) installs and knows of its tables.

The state is the example policy's (controller/examples/gateway.yaml), written as the controller
writes it: the CPM's own code (`controller.npm.NpmConnection`: the base configuration of
`controller.baseconfig.desired_base`, the classifier's banks of `controller.hsm`) over P4Runtime
to an in-process software switch on loopback. Its Python tables are then replayed through the
native mirror (`softswitch.native.dataplane.Mirror`) into a recorder in place of the C library:
each `og_entry_insert` and `og_dp_set_default` call, with the same blobs the switch gives C,
becomes a record of OG_FUZZ_STATE, which the harness replays into a real `og_dp`.

Records (64-bit words): INSERT table, nwords, blob[nwords], nmembers, stride, is_group,
members[nmembers * stride]; DEFAULT table, action, ndata, data[ndata]; DIRECT_METER cir, cburst,
pir, pburst (of the last INSERT); METER_CELL meter, index, cir, cburst, pir, pburst.
"""

from __future__ import annotations

import ctypes as ct
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.baseconfig import BaseConfig, desired_base, diff_base
from controller.classifier import acl_rules, ids_rules, split_plan
from controller.hsm.update import ClassifierBanks
from controller.metrics import Metrics
from controller.npm import NpmAddress, NpmConnection
from controller.policy import Policy, load_policy
from controller.runtime import default_pipeline
from opengate import p4constants as pc
from opengate.target import p4_build_dir, repo_root
from softswitch import tables as tb
from softswitch.native.cgen import KIND_CODES, CProgram, generate
from softswitch.native.dataplane import CEntry, CMeter, Mirror
from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.program import Program
from softswitch.switch import Switch

EXAMPLE_POLICY = repo_root() / "controller" / "examples" / "gateway.yaml"
TAG_BASE = 0x100
INSERT, DEFAULT, DIRECT_METER, METER_CELL = 1, 2, 3, 4
IMPLS = {"simple": 0, "indirect": 1, "indirect_ws": 2}
MAX_PARAMS = 16  # og_fuzz.c's og_fuzz_action.widths
M64 = (1 << 64) - 1


@dataclass(slots=True)
class Recorder:
    """Stands in for the C library under `Mirror`: records what it is given. Entries are real
    memory (ctypes buffers, kept here) because the mirror writes into them."""

    words: list[int] = field(default_factory=list)
    keep: list[Any] = field(default_factory=list)
    meters: dict[int, int] = field(default_factory=dict)  # direct meter address -> its entry

    def _buffer(self, size: int) -> int:
        buf = ct.create_string_buffer(size)
        self.keep.append(buf)
        return ct.addressof(buf)

    def og_entry_new(self, ndata: int, _meter_packets: int) -> int:
        addr = self._buffer(ct.sizeof(CEntry) + 8 * ndata)
        entry = CEntry.from_address(addr)  # as og_dp.c's og_entry_new leaves it
        entry.ndata, entry.action = ndata, -1
        return addr

    def og_entry_insert(
        self, _dp: int, ti: int, blob: bytes, nmembers: int, stride: int, words: Any, group: int
    ) -> int:
        blob_words = list(struct.unpack(f"={len(blob) // 8}Q", blob))
        # the last hit is a time of this process's clock, meaningless in the harness's, and
        # would make each generated header differ (and the build cache miss)
        blob_words[3 + blob_words[1]] = 0
        rows = [int(words[i]) for i in range(nmembers * stride)] if nmembers else []
        self.words += [INSERT, ti, len(blob_words), *blob_words, nmembers, stride, group, *rows]
        addr = self._buffer(ct.sizeof(CEntry))
        ndata = blob_words[1]
        if blob_words[2 + ndata] != M64:  # the entry has a direct meter: give it one to configure
            meter = self._buffer(ct.sizeof(CMeter))
            ct.c_void_p.from_address(addr + CEntry.meter.offset).value = meter
            self.meters[meter] = addr
        return addr

    def og_meter_configure(
        self, _dp: int, addr: int, cir: float, cburst: int, pir: float, pburst: int
    ) -> None:
        assert addr in self.meters, "only direct meters are configured through the mirror"
        self.words += [DIRECT_METER, int(cir), cburst, int(pir), pburst]

    def og_dp_set_default(self, _dp: int, ti: int, addr: int | None, _old: int | None) -> None:
        if not addr:
            return
        entry = CEntry.from_address(addr)
        data = (ct.c_uint64 * entry.ndata).from_address(addr + ct.sizeof(CEntry))
        self.words += [DEFAULT, ti, entry.action & M64, entry.ndata, *data]


def write_example_policy(address: str, policy: Policy) -> None:
    """The example policy's base configuration and classifier, as the CPM writes them to an NPM
    (`Controller._plan_npm` and `_execute`), every SPM at its full weight."""
    conn = NpmConnection(
        NpmAddress("fuzz", address), default_pipeline(), 1, Metrics(), lambda _k, _v: None
    )
    conn.connect()
    try:
        conn.ensure_pipeline()
        conn.enable_digests()
        weights = {spm.name: spm.weight for spm in policy.spms}
        desired = desired_base(policy, TAG_BASE, weights, conn.available)
        _compiled, update = ClassifierBanks().prepare(
            acl_rules(policy),
            ids_rules(policy),
            hybrid=pc.T_ACL_SPILL in conn.available,
            limits=conn.classifier_limits,
        )
        body, flip = split_plan(update)
        for batch in body:
            conn.write_batch(batch, "classifier (idle bank)")
        conn.apply_base(diff_base(BaseConfig(), desired))
        if flip is not None:
            conn.write_batch(flip, "classifier flip")
    finally:
        conn.close()


@contextmanager
def example_switch(policy_path: Path = EXAMPLE_POLICY) -> Iterator[Program]:
    """A software switch (Python engine) holding the example policy's state: its program."""
    switch = Switch(device_id=1, cpu_port=pc.CPU_PORT)
    server = P4RuntimeServer(switch, "127.0.0.1:0", engine="python")
    server.start()
    try:
        write_example_policy(f"127.0.0.1:{server.port}", load_policy(policy_path))
        yield switch.dataplane.program
    finally:
        server.stop()


def state_words(program: Program, cprog: CProgram) -> list[int]:
    """The program's tables and meters as OG_FUZZ_STATE records."""
    recorder = Recorder()
    mirror = Mirror(recorder, 0, cprog, program)  # type: ignore[arg-type]
    for t in program.tables.values():  # the recorder is no observer to keep
        t.observer = None
        if t.profile is not None:
            t.profile.observer = None
    del mirror
    for name, arr in program.meters.items():
        if arr.is_direct:
            continue
        for i, meter in enumerate(arr.meters):
            cfg = meter.config()
            if cfg is not None:
                recorder.words += [METER_CELL, cprog.meters[name], i, *cfg]
    return recorder.words


def table_meta(program: Program, cprog: CProgram) -> list[str]:
    """C initialisers of og_fuzz_table and og_fuzz_action for each table, in C's table order."""
    tables: list[str] = []
    actions: list[str] = []
    by_index = sorted(cprog.tables.items(), key=lambda item: item[1])
    for name, _index in by_index:
        t: tb.Table = program.tables[name]
        kinds = ", ".join(str(KIND_CODES[k]) for k in t.kinds) or "0"
        widths = ", ".join(str(w) for w in t.widths) or "0"
        stride = 1 + max((len(a.params) for a in t.actions.values()), default=0)
        meter = -1 if t.direct_meter is None else int(t.direct_meter.packets)
        first = len(actions)
        for spec in t.actions.values():
            if len(spec.params) > MAX_PARAMS:
                raise ValueError(f"action {spec.name!r}: more than {MAX_PARAMS} parameters")
            pw = ", ".join(str(w) for _n, w in spec.params) or "0"
            actions.append(f"  {{{spec.id}, {len(spec.params)}, {{{pw}}}}}, /* {spec.name} */")
        tables.append(
            f"  {{{len(t.kinds)}, {{{kinds}}}, {{{widths}}}, {int(t.needs_priority)}, "
            f"{IMPLS[t.impl]}, {meter}, {stride}, {first}, {len(actions) - first}}}, /* {name} */"
        )
    return [
        "static const og_fuzz_table OG_FUZZ_TABLES[] = {",
        *tables,
        "};",
        "static const og_fuzz_action OG_FUZZ_ACTIONS[] = {",
        *(actions or ["  {0, 0, {0}},"]),
        "};",
    ]


def meta_header(program: Program, cprog: CProgram, policy: Policy, words: list[int]) -> str:
    ports = sorted({p.number for p in policy.ports} | {pc.CPU_PORT})
    body = ",\n  ".join(
        ", ".join(f"{w}ULL" for w in words[i : i + 8]) for i in range(0, len(words), 8)
    )
    return "\n".join(
        [
            "/* Generated by fuzz/native/state.py: the example policy's state and the tables of",
            " * the OpenGate program, for fuzz/native/og_fuzz.c. */",
            f"#define OG_FUZZ_NTABLES {len(cprog.tables)}",
            f"#define OG_FUZZ_NPORTS {len(ports)}",
            f"static const uint32_t OG_FUZZ_PORTS[] = {{{', '.join(map(str, ports))}}};",
            *table_meta(program, cprog),
            f"#define OG_FUZZ_STATE_WORDS {len(words)}",
            f"static const uint64_t OG_FUZZ_STATE[] = {{\n  {body or '0'}\n}};",
            "",
        ]
    )


def write_inputs(out_dir: Path, policy_path: Path = EXAMPLE_POLICY) -> tuple[Path, Path]:
    """program.c and og_fuzz_meta.h in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    policy = load_policy(policy_path)
    with example_switch(policy_path) as program:
        cprog = generate(program)
        words = state_words(program, cprog)
        header = meta_header(program, cprog, policy, words)
    program_c = out_dir / "program.c"
    program_c.write_text(cprog.source)
    meta = out_dir / "og_fuzz_meta.h"
    meta.write_text(header)
    return program_c, meta


def program_json() -> Path:
    return p4_build_dir() / "opengate.json"
