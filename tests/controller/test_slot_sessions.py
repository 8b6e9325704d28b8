"""sessions.data_plane_entries: on_demand, against the switch double. A routed flow that a
data-plane slot carries (digest with dp_session 1) is recorded without a Write; reported again
(alive after FLOW_REPORT_TICKS) it gets its exact entries; not reported again it ages out of the
CPM's view as it does out of its slot, without a Write; acted on (block) it gets its entries
first. Flows the slot does not carry (a collision) and NAT flows are installed at once."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from controller import events as ev
from controller.api import ApiServer
from controller.npm import NpmConnection
from controller.runtime import Controller
from controller.session_model import flow_frame, parse_flow
from controller.sessions import SLOT_GRACE_SECONDS
from opengate import p4constants as pc
from opengate.p4info import P4Schema
from opengate.target import repo_root
from tests.controller.conftest import ControllerFactory, wait_until
from tests.controller.flows import GW_OUT, H1, OUT1, SPM1_MAC, ip, key, request
from tests.controller.test_sessions import db_sessions, expected_entry, session_entries
from tests.switch_double import SwitchDouble

FLOW = key(H1, OUT1, pc.IP_PROTO_TCP, 40000, 80)
REPLY = key(OUT1, H1, pc.IP_PROTO_TCP, 80, 40000)
INSPECTED = {"ids_class": 1, "spm_port": 3, "spm_mac": SPM1_MAC}


def on_demand(lab: Path, udp_idle: float = 30.0) -> Path:
    text = lab.read_text()
    text = text.replace("acl_to_cpu: drop", "acl_to_cpu: drop\n  data_plane_entries: on_demand")
    text = text.replace("udp: 30", f"udp: {udp_idle:g}")
    assert "on_demand" in text and f"udp: {udp_idle:g}" in text
    lab.write_text(text)
    return lab


def stats(controller: Controller) -> dict[str, int]:
    return dict(controller.bus.call(lambda: controller.status()["sessions"]))


def test_a_slot_carried_flow_is_recorded_without_a_write(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    controller = make_controller(switch, policy=on_demand(lab))
    writes_before = len(switch.writes)
    assert switch.inject_digest(pc.D_SESSION_REQUEST_T, [{**request(FLOW), "dp_session": 1}])
    (row,) = wait_until("the session in the DB", lambda: db_sessions(controller))
    assert (row["src"], row["sport"], row["r_src"], row["r_dport"]) == (
        ip(H1),
        40000,
        ip(OUT1),
        40000,
    )
    assert stats(controller)["slot_only"] == 1
    assert stats(controller)["active"] == 1
    assert session_entries(switch) == []
    assert len(switch.writes) == writes_before


def test_reported_again_it_gets_its_entries(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    controller = make_controller(switch, policy=on_demand(lab))
    first = {**request(FLOW, **INSPECTED), "dp_session": 1}
    assert switch.inject_digest(pc.D_SESSION_REQUEST_T, [first])
    wait_until("the session recorded", lambda: stats(controller)["slot_only"] == 1)
    # Reported again from the reply (either direction may be the one that shows it lives on).
    again = {**request(REPLY, **INSPECTED, ingress_port=2), "dp_session": 1}
    assert switch.inject_digest(pc.D_SESSION_REQUEST_T, [again])
    wait_until("both entries", lambda: len(session_entries(switch)) == 2)
    forward = {"class_id": 1, "spm_port": 3, "spm_mac": SPM1_MAC}
    assert session_entries(switch) == [
        expected_entry(controller, FLOW, **forward),
        expected_entry(controller, REPLY, **forward),
    ]
    counts = stats(controller)
    assert (counts["promoted"], counts["active"], counts["duplicates"]) == (1, 1, 0)
    assert len(db_sessions(controller)) == 1
    # Once installed, a further report is a duplicate: nothing is written again.
    writes = len(switch.writes)
    assert switch.inject_digest(pc.D_SESSION_REQUEST_T, [first])
    wait_until("the duplicate", lambda: stats(controller)["duplicates"] == 1)
    assert len(switch.writes) == writes


def test_not_reported_again_it_ages_out_without_a_write(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    controller = make_controller(switch, policy=on_demand(lab, udp_idle=0.2))
    flow = key(H1, OUT1, pc.IP_PROTO_UDP, 5353, 53)
    writes_before = len(switch.writes)
    assert switch.inject_digest(pc.D_SESSION_REQUEST_T, [{**request(flow), "dp_session": 1}])
    wait_until("the session recorded", lambda: len(db_sessions(controller)) == 1)
    # Its slot lives until REPORT_SECONDS + idle after the last report: not removed before.
    assert stats(controller)["active"] == 1
    wait_until(
        "the session aged out",
        lambda: stats(controller)["slot_aged"] == 1 and db_sessions(controller) == [],
        timeout=1.0 + 0.2 + SLOT_GRACE_SECONDS + 5,  # the report interval, the idle timeout
    )
    assert stats(controller)["active"] == 0
    assert len(switch.writes) == writes_before


def test_blocking_a_slot_only_session_installs_its_block_entries(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    controller = make_controller(switch, policy=on_demand(lab))
    assert switch.inject_digest(pc.D_SESSION_REQUEST_T, [{**request(FLOW), "dp_session": 1}])
    wait_until("the session recorded", lambda: stats(controller)["slot_only"] == 1)

    def block() -> None:
        assert controller.sessions is not None
        session = controller.sessions.find("npm1", FLOW)
        assert session is not None
        controller.sessions.block(session)

    controller.bus.call(block)
    assert session_entries(switch) == [
        expected_entry(controller, FLOW, 30.0, True),
        expected_entry(controller, REPLY, 30.0, True),
    ]
    (row,) = db_sessions(controller)
    assert row["state"] == "blocked"
    assert stats(controller)["promoted"] == 1


def test_flows_no_slot_carries_and_nat_flows_are_installed_at_once(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    controller = make_controller(switch, policy=on_demand(lab))
    # A collision: forwarded and reported, but no slot (dp_session 0).
    assert switch.inject_digest(pc.D_SESSION_REQUEST_T, [request(FLOW)])
    # A flow the data plane masqueraded (its binding in the digest).
    masqueraded = key(H1, OUT1, pc.IP_PROTO_TCP, 40001, 80)
    nat = {"nat_kind": pc.NAT_REWRITE_SRC, "nat_addr": ip(GW_OUT), "nat_port": 20005}
    assert switch.inject_digest(
        pc.D_SESSION_REQUEST_T, [{**request(masqueraded), **nat, "dp_session": 1}]
    )
    wait_until("four entries", lambda: len(session_entries(switch)) == 4)
    counts = stats(controller)
    assert (counts["installed"], counts["slot_only"]) == (2, 0)


def test_the_api_says_which_sessions_have_entries(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    """`GET /api/v1/sessions` gives each session's `entries`: false for one its slot alone
    carries, true for one installed (here a collision's flow)."""
    controller = make_controller(switch, policy=on_demand(lab))
    other = key(H1, OUT1, pc.IP_PROTO_TCP, 40001, 80)
    assert switch.inject_digest(
        pc.D_SESSION_REQUEST_T, [{**request(FLOW), "dp_session": 1}, request(other)]
    )
    wait_until("both sessions", lambda: len(db_sessions(controller)) == 2)
    api = ApiServer(controller, "127.0.0.1", 0, "t0ken")
    api.start()
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{api.port}", headers={"Authorization": "Bearer t0ken"}
        ) as client:
            rows = client.get("/api/v1/sessions").json()["sessions"]
    finally:
        api.stop()
    assert sorted((r["sport"], r["entries"]) for r in rows) == [(40000, False), (40001, True)]


def test_deleting_a_slot_only_session_ends_its_flow_in_the_npm(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    """Nothing was written for it: the CPM sends a packet of the flow through the pipeline with
    end_flow set, which frees its slot (its next packet is a new flow)."""
    controller = make_controller(switch, policy=on_demand(lab))
    assert switch.inject_digest(pc.D_SESSION_REQUEST_T, [{**request(FLOW), "dp_session": 1}])
    (row,) = wait_until("the session in the DB", lambda: db_sessions(controller))
    while switch.packet_out(0.01) is not None:  # (none expected; drained to be sure)
        pass
    writes = len(switch.writes)
    (result,) = controller.bus.publish(ev.SessionDeleteRequested(row["id"], "test")).result(5)
    assert result == {"deleted": row["id"]}
    payload, meta = wait_until("the packet-out", lambda: switch.packet_out(0.05))
    assert meta == {"egress_port": 0, "submit_to_ingress": 1, "end_flow": 1, "_pad": 0}
    assert payload == flow_frame(FLOW)
    assert parse_flow(payload) == FLOW
    assert len(switch.writes) == writes, "no entry to delete"
    assert db_sessions(controller) == []


def test_where_slots_outlive_their_entries_every_flow_gets_entries_and_an_end_frame(
    switch: SwitchDouble,
    make_controller: ControllerFactory,
    lab: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tofino's slots (p4src/include/arch/tna_flow_slots.p4) neither report a long-lived flow
    again nor end with their flow's entries. Against such a program (its P4Info has no
    `flow_state` register), on_demand cannot leave a flow to its slot: the CPM installs the
    entries; and removing a routed session sends its end_flow frame besides the DELETEs."""
    monkeypatch.setattr(NpmConnection, "slots_retire_themselves", property(lambda _self: False))
    controller = make_controller(switch, policy=on_demand(lab))
    assert switch.inject_digest(pc.D_SESSION_REQUEST_T, [{**request(FLOW), "dp_session": 1}])
    wait_until("both entries", lambda: len(session_entries(switch)) == 2)
    (row,) = wait_until("the session in the DB", lambda: db_sessions(controller))
    assert stats(controller)["slot_only"] == 0
    while switch.packet_out(0.01) is not None:
        pass
    (result,) = controller.bus.publish(ev.SessionDeleteRequested(row["id"], "test")).result(5)
    assert result == {"deleted": row["id"]}
    payload, meta = wait_until("the packet-out", lambda: switch.packet_out(0.05))
    assert meta == {"egress_port": 0, "submit_to_ingress": 1, "end_flow": 1, "_pad": 0}
    assert parse_flow(payload) == FLOW
    wait_until("no entries", lambda: session_entries(switch) == [])
    assert db_sessions(controller) == []
    assert switch.packet_out(0.05) is None, "one frame per flow"


def test_the_v1model_slots_retire_themselves(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    """v1model's slots retire themselves; so, trivially, do those of a program without slots
    (the default TNA builds: no flow_state register, no end_flow field), to which the CPM
    must never send an end_flow frame."""
    controller = make_controller(switch, policy=lab)
    connection = controller.npms["npm1"]
    assert connection.slots_retire_themselves
    tofino = P4Schema.load(
        repo_root() / "p4src" / "build" / "tofino" / "tofino-default.p4info.txtpb"
    )
    assert pc.R_FLOW_STATE not in tofino.registers
    connection.schema = tofino
    assert connection.slots_retire_themselves


def test_the_tofino2_slots_build_is_known_by_its_p4info(
    switch: SwitchDouble, make_controller: ControllerFactory, lab: Path
) -> None:
    """The committed P4Info of the Tofino 2 build with data-plane sessions (`make tofino`,
    tofino2-dp_sessions) is what the CPM takes for Tofino's slots: end_flow frames, entries for
    every flow. Its session digest reports dp_session without the NAT binding (Tofino's slots
    carry no NAT flow, and its learning digest holds 48 bytes), which the CPM reads as no NAT."""
    controller = make_controller(switch, policy=lab)
    connection = controller.npms["npm1"]
    path = repo_root() / "p4src" / "build" / "tofino" / "tofino2-dp_sessions.p4info.txtpb"
    tna = P4Schema.load(path)
    assert pc.R_FLOW_STATE not in tna.registers
    connection.schema = tna
    assert not connection.slots_retire_themselves
    fields = set(tna.digest_fields(pc.D_SESSION_REQUEST_T))
    nat = {"nat_addr", "nat_port", "nat_kind"}
    assert "dp_session" in fields
    assert not nat & fields
    v1model = P4Schema.load(repo_root() / "p4src" / "build" / "opengate.p4info.txtpb")
    assert fields == set(v1model.digest_fields(pc.D_SESSION_REQUEST_T)) - nat
