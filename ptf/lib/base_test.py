"""Layer 1 of the PTF suite: a P4Runtime test that pushes the pipeline once per run, resolves names
through P4Info, and removes every entity a test wrote, so tests do not see each other's state.

Test parameters (ptf --test-params, set by ptf/run_ptf.py): grpcaddr, device_id, p4info, config,
target (soft|bmv2).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from finsy.proto import p4r
from ptf import testutils
from ptf.base_tests import BaseTest

from opengate.entries import TableEntry
from opengate.p4info import P4Schema
from opengate.p4rt import P4RuntimeClient, entity_of

LOG = logging.getLogger("opengate.ptf")

_PIPELINE_COOKIE = 0x0_9E7E


class P4RuntimeTest(BaseTest):
    """Connects as primary, makes sure the pipeline under test is loaded, cleans up after itself."""

    # A subclass may test another build of the program (e.g. the naive-ACL profile).
    p4info_param: ClassVar[str] = "p4info"
    config_param: ClassVar[str] = "config"
    _loaded: ClassVar[tuple[str, str] | None] = None

    def setUp(self) -> None:
        BaseTest.setUp(self)
        self.dataplane = __import__("ptf").dataplane_instance
        self.dataplane.flush()
        params = testutils.test_params_get()
        self.target = str(params.get("target", "soft"))
        p4info_path = str(params[self.p4info_param])
        config_path = str(params[self.config_param])
        self.schema = P4Schema.load(p4info_path)
        self.client = self._primary_client(str(params["grpcaddr"]), int(params.get("device_id", 1)))
        self._config_path = config_path
        if P4RuntimeTest._loaded != (p4info_path, config_path):
            self._push_pipeline()
            P4RuntimeTest._loaded = (p4info_path, config_path)
        self._undo: list[Callable[[], None]] = []
        self._events_before = self._register_events()

    def tearDown(self) -> None:
        try:
            for undo in reversed(self._undo):
                undo()
            if self._register_events() != self._events_before:
                self.reset_registers()
        finally:
            self.client.close()
            BaseTest.tearDown(self)

    def _primary_client(self, address: str, device_id: int) -> P4RuntimeClient:
        """A client that is the primary controller. The previous test's client (the same election
        id) has closed its stream, but the switch may not have seen it go yet (a loaded machine):
        until it has, the new stream is not primary; try again, for a while."""
        deadline = time.monotonic() + 10
        while True:
            client = P4RuntimeClient(address, device_id=device_id, election_id=10).connect()
            if client.is_primary:
                return client
            client.close()
            if time.monotonic() > deadline:
                self.fail("the test client must be the primary controller (still not after 10 s)")
            time.sleep(0.1)

    def _push_pipeline(self) -> None:
        with open(self._config_path, "rb") as config:
            self.client.set_pipeline(self.schema.p4info, config.read(), _PIPELINE_COOKIE)

    # -- state the data plane wrote (registers) ------------------------------------------

    def _register_events(self) -> tuple[int, ...]:
        """Packet counts of the counter that records register writes (none: no registers)."""
        if self.register_event_counter not in self.schema.counters:
            return ()
        counter_id = self.schema.counters.get(self.register_event_counter).preamble.id
        cells = self.client.read_counter(counter_id)
        return tuple(sorted((c.index.index, c.data.packet_count) for c in cells))

    # The program's counter of the events that write its registers (a class attribute, so that
    # this layer names nothing of the program itself).
    register_event_counter: ClassVar[str] = ""

    def reset_registers(self) -> None:
        """Zero every register array, so that the next test starts from a clean data plane.
        The built-in switch takes a wildcard register write; BMv2 takes no register writes over
        P4Runtime, and a new pipeline push starts it from fresh state."""
        if self.target == "soft":
            updates = []
            for register in self.schema.p4info.registers:
                entry = p4r.RegisterEntry(register_id=register.preamble.id)
                entry.data.bitstring = b"\x00"
                updates.append(entry)
            self.client.modify(updates)
        else:
            self._push_pipeline()

    # -- writing, with automatic clean-up ----------------------------------------------

    def insert(self, entry: TableEntry) -> p4r.TableEntry:
        message = self.schema.encode_entry(entry)
        self.client.insert([message])
        self._undo.append(lambda: self.client.delete([message]))
        return message

    def insert_message(self, message: Any) -> None:
        """Insert any P4Runtime entity message (member, group, ...); deleted at tear-down."""
        self.client.insert([message])
        self._undo.append(lambda: self.client.delete([message]))

    def set_default(self, table: str, action: str, params: dict[str, int] | None = None) -> None:
        """Change a table's default action; the original default is restored at tear-down."""
        table_id = self.schema.tables.get(table).id
        query = p4r.TableEntry(table_id=table_id, is_default_action=True)
        (original,) = [e.table_entry for e in self.client.read([p4r.Entity(table_entry=query)])]
        entry = TableEntry.make(table, {}, action, params, is_default=True)
        self.client.modify([self.schema.encode_entry(entry)])
        restore = p4r.TableEntry()
        restore.CopyFrom(original)
        self._undo.append(lambda: self.client.modify([restore]))

    def write_meter(
        self, meter: str, index: int, cir: int, cburst: int, pir: int, pburst: int
    ) -> None:
        """Configure one cell of an indirect meter (bytes/s, bytes); reset at tear-down."""
        meter_id = self.schema.meters.get(meter).preamble.id
        entry = p4r.MeterEntry(meter_id=meter_id)
        entry.index.index = index
        entry.config.cir = cir
        entry.config.cburst = cburst
        entry.config.pir = pir
        entry.config.pburst = pburst
        self.client.modify([entry])
        reset = p4r.MeterEntry(meter_id=meter_id)
        reset.index.index = index
        self._undo.append(lambda: self.client.modify([reset]))

    def enable_digest(self, name: str) -> None:
        """Ask the switch to stream digest `name`, one record per list, at once."""
        entry = p4r.DigestEntry(digest_id=self.schema.digests.get(name).preamble.id)
        entry.config.max_timeout_ns = 0
        entry.config.max_list_size = 1
        entry.config.ack_timeout_ns = 1_000_000_000
        self.client.insert([entry])
        self._undo.append(lambda: self.client.delete([entry]))

    def next_digest(self, name: str, timeout: float = 5.0) -> dict[str, int]:
        """The next record of digest `name`, by member name (acknowledged)."""
        digest_id = self.schema.digests.get(name).preamble.id
        fields = self.schema.digest_fields(name)
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            digest = self.client.get_digest(remaining)
            if digest is None:
                break
            self.client.ack_digest(digest)
            if digest.digest_id != digest_id or not digest.data:
                continue
            members = digest.data[0].struct.members
            return {
                field: int.from_bytes(member.bitstring, "big")
                for field, member in zip(fields, members, strict=True)
            }
        self.fail(f"no {name} digest within {timeout:g}s")

    def drain_digests(self) -> int:
        count = 0
        while (digest := self.client.get_digest(0.05)) is not None:
            self.client.ack_digest(digest)
            count += 1
        return count

    # -- reading ----------------------------------------------------------------------

    def counter(self, name: str, index: int) -> tuple[int, int]:
        """(packets, bytes) of one cell of an indirect counter."""
        counter_id = self.schema.counters.get(name).preamble.id
        (entry,) = self.client.read_counter(counter_id, index)
        return entry.data.packet_count, entry.data.byte_count

    def direct_counter(self, entry: TableEntry) -> tuple[int, int]:
        query = p4r.DirectCounterEntry()
        query.table_entry.CopyFrom(self.schema.encode_entry(entry))
        query.table_entry.ClearField("action")
        (result,) = [e.direct_counter_entry for e in self.client.read([entity_of(query)])]
        return result.data.packet_count, result.data.byte_count

    def wait_for(self, what: str, condition: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Poll `condition` until it returns something truthy; fail naming `what`."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                self.fail(f"timed out after {timeout:g}s waiting for {what}")
            time.sleep(0.02)

    @staticmethod
    def entries(*items: TableEntry) -> Iterable[TableEntry]:
        return items
