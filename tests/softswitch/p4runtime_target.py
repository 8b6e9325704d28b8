"""The target of the P4Runtime conformance tests (tests/softswitch/test_p4runtime_*.py), chosen
in one place: `target`, a fixture over the built-in switch (its server in this process) and
BMv2's simple_switch_grpc (a process, skipped when it is not on PATH). Both run the committed
fixture program l3 (tests/softswitch/fixtures/l3.p4, its BMv2 JSON and P4Info).

A test that checks what BMv2 is known to do otherwise carries `@bmv2_differs("...")` with the
spec's words: on BMv2 it is an expected failure. A test that plays the data plane (frames in,
digests) runs on the built-in switch only: `target.require_in_process()` skips it elsewhere.

The clients are plain grpc channels with gRPC's defaults (no raised metadata limit): what a
controller that did not read this project's code would use.
"""

from __future__ import annotations

import os
import queue
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import grpc
import pytest
from finsy.proto import p4i, p4r, p4r_grpc, rpc_status
from google.protobuf import text_format

from opengate.p4info import PREAMBLE_KINDS
from opengate.switch import running_switch
from opengate.target import BMV2_BINARY, select_target
from softswitch.p4runtime_server import P4RuntimeServer
from softswitch.switch import Switch
from tests.softswitch.conftest import FIXTURES

DEVICE = 1
CPU_PORT = 255
PROGRAM = "l3"
WAIT = 5.0  # seconds a stream message may take to arrive

F = TypeVar("F", bound=Callable[..., Any])


def bmv2_differs(reason: str) -> Callable[[F], F]:
    """Mark a test as one BMv2 is known to fail: `reason` quotes the spec and says what BMv2
    (its P4Runtime server, PI) does instead."""

    def mark(test: F) -> F:
        test.bmv2_differs = reason  # type: ignore[attr-defined]
        return test

    return mark


def p4info(name: str = PROGRAM) -> p4i.P4Info:
    info = p4i.P4Info()
    text_format.Parse((FIXTURES / f"{name}.p4info.txtpb").read_text(), info)
    return info


def device_config(name: str = PROGRAM) -> bytes:
    return (FIXTURES / f"{name}.json").read_bytes()


def ids(info: p4i.P4Info | None = None) -> dict[str, int]:
    """Every P4Info object's id by its name."""
    info = info or p4info()
    return {o.preamble.name: o.preamble.id for k in PREAMBLE_KINDS for o in getattr(info, k)}


def wait_until(what: str, condition: Callable[[], object], timeout: float = WAIT) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.005)


def uint128(value: int) -> p4r.Uint128:
    return p4r.Uint128(high=value >> 64, low=value & ((1 << 64) - 1))


def error_details(error: grpc.RpcError) -> tuple[rpc_status.Status | None, list[p4r.Error]]:
    """The google.rpc.Status a failed call carried (grpc-status-details-bin), and its p4.Errors."""
    for key, value in cast(grpc.Call, error).trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = rpc_status.Status()
            status.ParseFromString(cast(bytes, value))
            errors = []
            for packed in status.details:
                detail = p4r.Error()
                assert packed.Unpack(detail), packed.type_url
                errors.append(detail)
            return status, errors
    return None, []


@dataclass
class Controller:
    """One P4Runtime client: a channel, optionally its stream, and what arrives on it."""

    channel: grpc.Channel
    election_id: int | None = None
    stub: Any = None
    responses: queue.Queue[Any] = field(default_factory=queue.Queue)
    requests: queue.Queue[Any] = field(default_factory=queue.Queue)
    call: Any = None
    status: list[tuple[grpc.StatusCode, str]] = field(default_factory=list)  # the stream's end

    def __post_init__(self) -> None:
        self.stub = p4r_grpc.P4RuntimeStub(self.channel)

    # -- the stream
    def open(self, election_id: int | None, device_id: int = DEVICE, role: str = "") -> Any:
        """Open the stream and arbitrate; the first arbitration answer."""

        def gen() -> Iterator[Any]:
            while (item := self.requests.get()) is not None:
                yield item

        self.call = self.stub.StreamChannel(gen())

        def pump() -> None:
            try:
                for r in self.call:
                    self.responses.put(r)
            except grpc.RpcError as exc:
                self.status.append((exc.code(), exc.details() or ""))
                self.responses.put(exc)

        threading.Thread(target=pump, daemon=True).start()
        self.arbitrate(election_id, device_id, role)
        return self.next("arbitration")

    def arbitrate(self, election_id: int | None, device_id: int = DEVICE, role: str = "") -> None:
        msg = p4r.StreamMessageRequest()
        msg.arbitration.device_id = device_id
        if election_id is not None:
            msg.arbitration.election_id.CopyFrom(uint128(election_id))
        if role:
            msg.arbitration.role.name = role
        self.election_id = election_id
        self.requests.put(msg)

    def send(self, msg: p4r.StreamMessageRequest) -> None:
        self.requests.put(msg)

    def next(self, kind: str, timeout: float = WAIT) -> Any:
        """The next stream message of `kind` (others are skipped); raises the stream's error."""
        while True:
            r = self.responses.get(timeout=timeout)
            if isinstance(r, Exception):
                raise r
            if r.WhichOneof("update") == kind:
                return getattr(r, kind)

    def stream_error(self, timeout: float = WAIT) -> grpc.RpcError:
        """The error the server ended the stream with."""
        while True:
            r = self.responses.get(timeout=timeout)
            if isinstance(r, grpc.RpcError):
                return r

    def nothing_more(self, kind: str, within: float = 0.3) -> bool:
        """No message of `kind` arrives within `within` seconds (a bounded wait for absence)."""
        try:
            self.next(kind, timeout=within)
        except queue.Empty:
            return True
        return False

    def close(self) -> None:
        self.requests.put(None)
        if self.call is not None:
            self.call.cancel()

    # -- unary calls
    def write(
        self,
        *updates: p4r.Update,
        election_id: int | None = None,
        role: str = "",
        atomicity: int = p4r.WriteRequest.CONTINUE_ON_ERROR,
        device_id: int = DEVICE,
        metadata: tuple[tuple[str, str], ...] = (),
    ) -> None:
        req = p4r.WriteRequest(device_id=device_id, role=role, atomicity=atomicity)  # type: ignore[arg-type]
        eid = self.election_id if election_id is None else election_id
        if eid is not None:
            req.election_id.CopyFrom(uint128(eid))
        req.updates.extend(updates)
        self.stub.Write(req, metadata=metadata or None)

    def read(self, *entities: p4r.Entity, role: str = "", device_id: int = DEVICE) -> list[Any]:
        out: list[Any] = []
        request = p4r.ReadRequest(device_id=device_id, role=role, entities=list(entities))
        for resp in self.stub.Read(request):
            out.extend(resp.entities)
        return out

    def set_pipeline(
        self,
        action: int = p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
        name: str = PROGRAM,
        cookie: int = 42,
        config: bool = True,
        role: str = "",
        device_config_bytes: bytes | None = None,
    ) -> None:
        req = p4r.SetForwardingPipelineConfigRequest(device_id=DEVICE, action=action, role=role)  # type: ignore[arg-type]
        if self.election_id is not None:
            req.election_id.CopyFrom(uint128(self.election_id))
        if config:
            req.config.p4info.CopyFrom(p4info(name))
            req.config.p4_device_config = (
                device_config(name) if device_config_bytes is None else device_config_bytes
            )
            req.config.cookie.cookie = cookie
        self.stub.SetForwardingPipelineConfig(req)

    def get_pipeline(self, response_type: int = 0) -> p4r.ForwardingPipelineConfig:
        req = p4r.GetForwardingPipelineConfigRequest(
            device_id=DEVICE,
            response_type=response_type,  # type: ignore[arg-type]
        )
        config: p4r.ForwardingPipelineConfig = self.stub.GetForwardingPipelineConfig(req).config
        return config


@dataclass
class Target:
    """A running P4Runtime server under test, and the clients made for it."""

    name: str  # soft | bmv2
    address: str
    switch: Switch | None = None  # the built-in switch in this process (None: BMv2)
    server: P4RuntimeServer | None = None
    sent: list[tuple[int, bytes]] = field(default_factory=list)  # frames out of its ports
    clients: list[tuple[Controller, grpc.Channel]] = field(default_factory=list)

    def controller(self, election_id: int | None = None, stream: bool = True) -> Controller:
        """A new client on its own channel; with `stream`, arbitrated with `election_id`."""
        channel = grpc.insecure_channel(self.address)
        c = Controller(channel)
        self.clients.append((c, channel))
        if stream:
            c.open(election_id)
        else:
            c.election_id = election_id
        return c

    def primary(self, election_id: int = 10) -> Controller:
        """A controller that is primary (asserted) and has pushed the program."""
        c = self.controller(election_id)
        c.set_pipeline()
        return c

    def require_in_process(self) -> Switch:
        """The built-in switch object, to play the data plane; skips on BMv2."""
        if self.switch is None:
            pytest.skip("plays the data plane (frames in, digests) in this process")
        return self.switch

    def close(self) -> None:
        for c, channel in self.clients:
            c.close()
            channel.close()


def _soft() -> Iterator[Target]:
    switch = Switch(device_id=DEVICE, cpu_port=CPU_PORT)
    server = P4RuntimeServer(switch, "127.0.0.1:0", engine="python")
    target = Target("soft", f"127.0.0.1:{server.port}", switch, server)
    switch.transmit = lambda port, frame: target.sent.append((port, frame))
    server.start()
    try:
        yield target
    finally:
        target.close()
        server.stop(grace=0)


def _bmv2(log_dir: Path) -> Iterator[Target]:
    if shutil.which(BMV2_BINARY) is None:
        pytest.skip(f"{BMV2_BINARY} (BMv2) is not on PATH")
    choice = select_target({**os.environ, "TARGET": "bmv2"})
    with running_switch({}, log_dir / "bmv2.log", choice, device_id=DEVICE) as running:
        target = Target("bmv2", running.grpc_address)
        try:
            yield target
        finally:
            target.close()


TARGETS = [pytest.param("soft"), pytest.param("bmv2", marks=pytest.mark.needs_bmv2)]


@pytest.fixture(params=TARGETS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    reason = getattr(request.function, "bmv2_differs", None)
    if request.param == "bmv2" and reason:
        request.applymarker(pytest.mark.xfail(reason=f"BMv2 differs: {reason}", strict=False))
    yield from (_soft() if request.param == "soft" else _bmv2(tmp_path))
