"""UDP flows for the end-to-end tests, run inside a Mininet host against a UDP echo service.

    python -m tests.e2e.udp_probe fixed DST PORT_FIRST COUNT [--step N] [--timeout S]
                                        [--tries T] [--gap S]
        one datagram from each of COUNT local ports FIRST, FIRST+N, ..., GAP seconds apart; the
        ports without an answer after TIMEOUT send again, up to TRIES datagrams in all (as a UDP
        client retries: a datagram may be dropped by a full queue on a loaded host, which says
        nothing of the flow's path); prints one JSON object
        {"replied": [ports...], "silent": [ports...], "resent": [ports answered after a resend]}
    python -m tests.e2e.udp_probe stream DST --duration S --interval S
        a new flow (a new local port) every interval; prints "sent PORT TIME" as it goes, then
        one JSON line {"flows": [[port, sent_at, replied], ...]}
    python -m tests.e2e.udp_probe refused DST PORT FLOWS [--timeout S]
        FLOWS flows (new local ports), one datagram each to DST:PORT where nothing listens;
        prints one JSON object {"refused": [ports whose socket got the port unreachable],
        "silent": [ports without an answer after TIMEOUT], "answered": [...]}
    python -m tests.e2e.udp_probe rounds DST FLOWS TRIPS [--timeout S]
        FLOWS flows (new local ports), one after the other, each TRIPS round trips from its
        first datagram on, each waiting up to TIMEOUT for its answer; prints one JSON object
        {"lost": [[flow, trip], ...], "ports": [the flows' local ports]}

TIME is time.time(): the hosts share the test's clock (they are network namespaces only).
"""

from __future__ import annotations

import argparse
import json
import selectors
import socket
import sys
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the probe itself runs in a Mininet host with the standard library only
    from topo.net import GatewayNetwork

ECHO_PORT = 7

# Local ports for sets of flows: spaced apart, so that the flows differ in many key bits (CRC is
# linear: ports differing only in their low bits can all land on one member).
STEP = 97
FLOWS = 64  # the selector's weights follow the SPMs' load, so they may differ up to 8:1


def run_probe(gateway: GatewayNetwork, host: str, args: str, timeout: float = 60) -> Any:
    """Run this module in `host` with `args`; its last output line, parsed as JSON."""
    command = f"{sys.executable} -m tests.e2e.udp_probe {args}"
    result = gateway.run(host, command, timeout=timeout)
    assert result.returncode == 0, f"{host}$ {command}:\n{result.output}"
    return json.loads(result.output.strip().splitlines()[-1])


def assert_answered(outcome: dict[str, list[int]], what: str) -> None:
    """Every flow of a `fixed` run answered, and at most one in eight only after a resend (a
    datagram lost now and then on a loaded host; not the first datagram of every flow)."""
    assert outcome["silent"] == [], f"{what}: flows without an answer {outcome['silent']}"
    resent = outcome["resent"]
    assert len(resent) <= len(outcome["replied"]) // 8, (
        f"{what}: {len(resent)} flows answered only after a resend: {resent}"
    )


def fixed(
    dst: str, first: int, count: int, step: int, timeout: float, tries: int = 1, gap: float = 0.0
) -> dict[str, list[int]]:
    sockets = {}
    for port in range(first, first + count * step, step):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", port))
        sock.setblocking(False)
        sockets[port] = sock
    selector = selectors.DefaultSelector()
    for port, sock in sockets.items():
        selector.register(sock, selectors.EVENT_READ, port)
    replied: set[int] = set()
    resent: set[int] = set()
    for attempt in range(tries):
        waiting = [port for port in sockets if port not in replied]
        if not waiting:
            break
        if attempt:
            resent.update(waiting)
        for port in waiting:
            sockets[port].sendto(f"probe {port}".encode(), (dst, ECHO_PORT))
            if gap:
                replied |= _collect(selector, time.monotonic() + gap, len(sockets) - len(replied))
        replied |= _collect(selector, time.monotonic() + timeout, len(sockets) - len(replied))
    selector.close()
    for sock in sockets.values():
        sock.close()
    return {
        "replied": sorted(replied),
        "silent": sorted(set(sockets) - replied),
        "resent": sorted(resent & replied),
    }


def _collect(selector: selectors.BaseSelector, deadline: float, wanted: int) -> set[int]:
    """The ports answered before `deadline` (at most `wanted`: then it returns at once)."""
    replied: set[int] = set()
    while len(replied) < wanted and time.monotonic() < deadline:
        for key, _ in selector.select(max(0.0, deadline - time.monotonic())):
            key.fileobj.recv(2048)  # type: ignore[union-attr]
            replied.add(key.data)
            selector.unregister(key.fileobj)
    return replied


def stream(dst: str, duration: float, interval: float, settle: float) -> list[list[float]]:
    selector = selectors.DefaultSelector()
    flows: dict[int, list[float]] = {}
    sockets = []
    end = time.monotonic() + duration
    next_send = time.monotonic()
    while time.monotonic() < end + settle:
        now = time.monotonic()
        if now < end and now >= next_send:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("", 0))
            sock.setblocking(False)
            port = sock.getsockname()[1]
            sent_at = time.time()
            sock.sendto(b"flow", (dst, ECHO_PORT))
            flows[port] = [port, sent_at, 0]
            sockets.append(sock)
            selector.register(sock, selectors.EVENT_READ, port)
            print(f"sent {port} {sent_at:.3f}", flush=True)
            next_send += interval
        for key, _ in selector.select(0.01):
            key.fileobj.recv(2048)  # type: ignore[union-attr]
            flows[key.data][2] = 1
            selector.unregister(key.fileobj)
    for sock in sockets:
        sock.close()
    return list(flows.values())


def rounds(dst: str, flows: int, trips: int, timeout: float) -> dict[str, list[Any]]:
    lost: list[list[int]] = []
    ports: list[int] = []
    for flow in range(flows):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(timeout)
            sock.connect((dst, ECHO_PORT))
            ports.append(sock.getsockname()[1])
            for trip in range(trips):
                sock.send(b"x")
                try:
                    sock.recv(64)
                except OSError:
                    lost.append([flow, trip])
    return {"lost": lost, "ports": ports}


def refused(dst: str, port: int, flows: int, timeout: float) -> dict[str, list[int]]:
    """`flows` flows (new local ports), one datagram each to dst:port, where nothing listens:
    a connected socket's recv() raises ConnectionRefusedError when the ICMP port unreachable
    comes back to it (the kernel matches the error's quoted packet to the socket). An IPv6
    `dst` (NAT64's synthesized address among them) takes an IPv6 socket, refused by an ICMPv6
    port unreachable."""
    outcome: dict[str, list[int]] = {"refused": [], "silent": [], "answered": []}
    for _ in range(flows):
        family = socket.AF_INET6 if ":" in dst else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.settimeout(timeout)
            sock.connect((dst, port))
            local = sock.getsockname()[1]
            sock.send(b"anyone there?")
            try:
                sock.recv(64)
            except ConnectionRefusedError:
                outcome["refused"].append(local)
            except TimeoutError:
                outcome["silent"].append(local)
            else:
                outcome["answered"].append(local)
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="udp_probe")
    sub = parser.add_subparsers(dest="mode", required=True)
    f = sub.add_parser("fixed")
    f.add_argument("dst")
    f.add_argument("first", type=int)
    f.add_argument("count", type=int)
    f.add_argument("--step", type=int, default=1)
    f.add_argument("--timeout", type=float, default=3.0, help="wait this long for answers")
    f.add_argument("--tries", type=int, default=3, help="datagrams per port at most")
    f.add_argument("--gap", type=float, default=0.002, help="seconds between first datagrams")
    s = sub.add_parser("stream")
    s.add_argument("dst")
    s.add_argument("--duration", type=float, default=6.0)
    s.add_argument("--interval", type=float, default=0.1)
    s.add_argument("--settle", type=float, default=2.0, help="wait this long for late replies")
    r = sub.add_parser("rounds")
    r.add_argument("dst")
    r.add_argument("flows", type=int)
    r.add_argument("trips", type=int)
    r.add_argument("--timeout", type=float, default=2.0, help="wait this long for each answer")
    c = sub.add_parser("refused")
    c.add_argument("dst")
    c.add_argument("port", type=int)
    c.add_argument("flows", type=int)
    c.add_argument("--timeout", type=float, default=3.0, help="wait this long for the error")
    args = parser.parse_args(argv)
    if args.mode == "refused":
        print(json.dumps(refused(args.dst, args.port, args.flows, args.timeout)), flush=True)
    elif args.mode == "rounds":
        print(json.dumps(rounds(args.dst, args.flows, args.trips, args.timeout)), flush=True)
    elif args.mode == "fixed":
        print(
            json.dumps(
                fixed(
                    args.dst, args.first, args.count, args.step, args.timeout, args.tries, args.gap
                )
            ),
            flush=True,
        )
    else:
        flows = stream(args.dst, args.duration, args.interval, args.settle)
        print(json.dumps({"flows": flows}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
