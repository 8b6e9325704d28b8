"""`python -m fuzz.seeds`: (re)write the seed corpora under fuzz/corpus/<target>/ (seed-*
files; findings, finding-* files, are kept). Seeds are well-formed inputs that reach deep into
each target: the example topology's flows for the data plane, the SPM's protocols, the example
policies and rules files; the fuzzers mutate them."""

from __future__ import annotations

import random
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Packet, Raw

from opengate.target import repo_root

CORPUS = repo_root() / "fuzz" / "corpus"
EXAMPLES = repo_root() / "controller" / "examples"
# the example topology (controller/examples/gateway.yaml)
GW_IN_MAC, GW_OUT_MAC = "02:00:00:00:00:01", "02:00:00:00:00:02"
H1_MAC, OUT1_MAC, SPM1_MAC = "00:00:00:00:01:10", "00:00:00:00:02:20", "00:00:00:00:03:33"
H1, OUT1, GW_IN, GW_OUT = "10.0.1.10", "198.51.100.20", "10.0.1.1", "198.51.100.1"
PORTS = (1, 2, 3, 4, 255)  # OG_FUZZ_PORTS: the example policy's ports and the CPU port
INSIDE, OUTSIDE, SPM1, CPU = 0, 1, 2, 4  # their selectors in a frame record
HTTP_GET = b"GET /index.html?q=a%20b HTTP/1.1\r\nHost: out1\r\nCookie: k=v\r\n\r\n"
HTTP_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"


def record(selector: int, frame: bytes | Packet) -> bytes:
    """A frame of the native harness's input: port selector, 16-bit length, bytes."""
    raw = bytes(frame)
    return struct.pack("!BH", selector, len(raw)) + raw


def out_tcp(sport: int, flags: str, seq: int, payload: bytes = b"") -> Packet:
    return (
        Ether(src=H1_MAC, dst=GW_IN_MAC)
        / IP(src=H1, dst=OUT1)
        / TCP(sport=sport, dport=80, flags=flags, seq=seq, ack=1)
        / Raw(payload)
    )


def native_frames() -> Iterator[tuple[str, bytes]]:
    syn = out_tcp(40000, "S", 1000)
    synack = (
        Ether(src=OUT1_MAC, dst=GW_OUT_MAC)
        / IP(src=OUT1, dst=GW_OUT)
        / TCP(sport=80, dport=49152, flags="SA", seq=5000, ack=1001)
    )
    yield (
        "tcp-flow",
        b"".join(
            [
                record(INSIDE, syn),
                record(OUTSIDE, synack),
                record(INSIDE, out_tcp(40000, "A", 1001)),
                record(INSIDE, out_tcp(40000, "PA", 1001, HTTP_GET)),
                record(INSIDE, out_tcp(40000, "FA", 1001 + len(HTTP_GET))),
            ]
        ),
    )
    yield (
        "arp-for-gateway",
        record(
            INSIDE,
            Ether(src=H1_MAC, dst="ff:ff:ff:ff:ff:ff") / ARP(hwsrc=H1_MAC, psrc=H1, pdst=GW_IN),
        ),
    )
    yield (
        "ping-gateway",
        record(
            INSIDE, Ether(src=H1_MAC, dst=GW_IN_MAC) / IP(src=H1, dst=GW_IN) / ICMP(id=7, seq=1)
        ),
    )
    yield (
        "udp-out",
        record(
            INSIDE,
            Ether(src=H1_MAC, dst=GW_IN_MAC)
            / IP(src=H1, dst=OUT1)
            / UDP(sport=5353, dport=53)
            / b"q",
        ),
    )
    yield (
        "port-forward",
        record(
            OUTSIDE,
            Ether(src=OUT1_MAC, dst=GW_OUT_MAC)
            / IP(src=OUT1, dst=GW_OUT)
            / TCP(sport=33000, dport=8080, flags="S"),
        ),
    )
    yield (
        "ipv6",
        record(
            INSIDE,
            Ether(src=H1_MAC, dst=GW_IN_MAC)
            / IPv6(src="fd00::10", dst="2001:db8::20")
            / IPv6ExtHdrHopByHop()
            / UDP(sport=1, dport=2),
        ),
    )
    yield (
        "vlan",
        record(
            INSIDE,
            Ether(src=H1_MAC, dst=GW_IN_MAC) / Dot1Q(vlan=10) / IP(src=H1, dst=OUT1) / ICMP(),
        ),
    )
    yield (
        "ip-options-fragment",
        record(
            INSIDE,
            Ether(src=H1_MAC, dst=GW_IN_MAC)
            / IP(src=H1, dst=OUT1, flags="MF", frag=0, options=b"\x01\x01\x01\x00")
            / UDP(sport=9, dport=9)
            / (b"x" * 40),
        ),
    )
    yield (
        "from-spm",
        record(
            SPM1,
            Ether(src=SPM1_MAC, dst="02:00:00:00:01:00") / IP(src=H1, dst=OUT1) / TCP(flags="PA"),
        ),
    )
    # a packet-out (packet_out_h: egress port 9 bits, submit_to_ingress, end_flow, padding)
    yield "packet-out-direct", record(CPU, struct.pack("!H", 2 << 7) + bytes(synack))
    yield "packet-out-submit", record(CPU, struct.pack("!H", (2 << 7) | (1 << 6)) + bytes(syn))
    yield "runt", record(INSIDE, bytes(syn)[:17])


def native_writes() -> Iterator[tuple[str, bytes]]:
    rng = random.Random(52)
    frames = dict(native_frames())
    yield "no-writes", b"\x00" + frames["tcp-flow"]
    for i in range(6):
        ops = bytes(rng.randrange(256) for _ in range(40 + 40 * i))
        yield f"writes-{i}", bytes([8 + 8 * i]) + ops + frames["tcp-flow"]


def packets() -> Iterator[tuple[str, bytes]]:
    def ip_only(frame: Packet) -> bytes:
        return bytes(frame[IP]) if IP in frame else bytes(frame[IPv6])

    for name, pkt in (
        ("tcp-syn", IP(src=H1, dst=OUT1) / TCP(sport=40000, dport=80, flags="S")),
        ("tcp-data", IP(src=H1, dst=OUT1) / TCP(flags="PA", options=[("MSS", 1460)]) / HTTP_GET),
        ("udp", IP(src=H1, dst=OUT1) / UDP(sport=53, dport=5353) / b"answer"),
        ("icmp-echo", IP(src=H1, dst=OUT1) / ICMP(id=1, seq=2)),
        ("ip-options", IP(src=H1, dst=OUT1, options=b"\x01\x01\x01\x00") / UDP()),
        ("fragment", IP(src=H1, dst=OUT1, flags="MF", frag=0) / UDP() / (b"x" * 16)),
        ("later-fragment", IP(src=H1, dst=OUT1, frag=3) / (b"x" * 16)),
        ("ipv6-tcp", IPv6(src="fd00::1", dst="2001:db8::2") / TCP(dport=443, flags="S")),
        (
            "ipv6-ext",
            IPv6(src="fd00::1", dst="2001:db8::2")
            / IPv6ExtHdrHopByHop()
            / IPv6ExtHdrFragment(m=1)
            / UDP(),
        ),
        ("sctp", IP(src=H1, dst=OUT1, proto=132) / struct.pack("!HHII", 1, 2, 0, 0)),
    ):
        yield name, ip_only(Ether() / pkt)


def community_ids() -> Iterator[tuple[str, bytes]]:
    v4 = bytes([10, 0, 1, 10]) + bytes([198, 51, 100, 20])
    v6 = bytes(range(16)) + bytes(range(16, 32))
    yield "tcp-v4", bytes([6, 0]) + v4 + b"\0\0" + struct.pack("!HH", 40000, 80)
    yield "icmp-v4", bytes([1, 0]) + v4 + b"\0\0" + struct.pack("!HH", 8, 0)
    yield "udp-v6", bytes([17, 1]) + v6 + b"\0\1" + struct.pack("!HH", 53, 5353)
    yield "no-ports", bytes([47, 2]) + v4 + b"\0\0"
    yield "bad-length", bytes([6, 0x85]) + b"\1" * 10


def reassembly() -> Iterator[tuple[str, bytes]]:
    head = bytes([0]) + struct.pack("!IHBH", 0xFFFFFF00, 4096, 16, 8192)  # across the wrap
    segs = [(0, 100, 0), (200, 100, 0), (100, 150, 0), (300, 50, 1), (50, 100, 0)]
    yield "in-and-out-of-order", head + b"".join(struct.pack("!HBB", *s) for s in segs)
    chaos = bytes([1]) + struct.pack("!IHBH", 7, 300, 4, 200)
    yield (
        "arbitrary",
        chaos
        + struct.pack("!IBB", 8, 5, 0)
        + b"hello"
        + struct.pack("!IBB", 1 << 31, 3, 1)
        + b"abc",
    )


def http() -> Iterator[tuple[str, bytes]]:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX: y\r\n\r\n"
    )
    pipelined = HTTP_GET + b"HEAD / HTTP/1.1\r\n\r\n" + HTTP_GET
    responses = HTTP_OK + b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n" + chunked
    for name, req, resp, cuts in (
        ("simple", HTTP_GET, HTTP_OK, [3, 20]),
        ("pipelined", pipelined, responses, [1, 50, 90, 120]),
        (
            "continue",
            b"POST /u HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
            b"HTTP/1.1 100 Continue\r\n\r\n" + HTTP_OK,
            [10],
        ),
        ("until-close", b"GET / HTTP/1.0\r\n\r\n", b"HTTP/1.0 200 OK\r\n\r\nbody to the end", [5]),
    ):
        head = (
            bytes([len(cuts)])
            + struct.pack("!H", len(req))
            + b"".join(struct.pack("!H", c) for c in cuts)
        )
        yield name, head + req + resp


def rules() -> Iterator[tuple[str, bytes]]:
    for path in sorted(EXAMPLES.glob("*.rules")):
        yield path.stem, path.read_bytes()
    yield (
        "options",
        (
            b'alert tcp $HOME_NET any -> $EXTERNAL_NET [80,8080:8090] (msg:"a \\"q\\"; x"; '
            b'flow:to_server,established; content:"GET"; http_uri; pcre:"/a.b/i"; sid:1; rev:2;)\n'
            b"# alert udp any any <> !10.0.0.0/8 !53 (sid:2;)\n"
            b'alert http (msg:"svc"; http_header; content:"x"; sid:3;)\n'
            b"alert tcp [10.0.0.0/8,!10.1.0.0/16] any -> any any \\\n  (sid:4;)\n"
        ),
    )


def policies() -> Iterator[tuple[str, bytes]]:
    for path in sorted(EXAMPLES.glob("*.yaml")):
        yield path.stem, path.read_bytes()


SEEDS = {
    "native-frames": native_frames,
    "native-writes": native_writes,
    "packet": packets,
    "community_id": community_ids,
    "reassembly": reassembly,
    "http": http,
    "snort_rules": rules,
    "ips_rules": rules,
    "policy": policies,
}


def write(corpus: Path = CORPUS) -> None:
    for target, make in SEEDS.items():
        out = corpus / target
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("seed-*"):
            old.unlink()
        for name, data in make():
            (out / f"seed-{name}").write_bytes(data)


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else CORPUS)
