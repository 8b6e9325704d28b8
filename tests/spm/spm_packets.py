"""Packet builders shared by the SPM tests (imported as a plain module, not a fixture)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.packet import Raw


def ip(src: str, dst: str) -> Any:
    """An IPv4 or IPv6 header (by the addresses' family)."""
    return IPv6(src=src, dst=dst) if ":" in src else IP(src=src, dst=dst)


@dataclass
class TcpConversation:
    """Builds the packets of one TCP connection with consistent sequence numbers (over IPv6
    when the addresses are IPv6)."""

    client: str = "10.0.0.1"
    server: str = "192.0.2.80"
    cport: int = 40000
    sport: int = 80
    cseq: int = 1000
    sseq: int = 5000
    packets: list[bytes] = field(default_factory=list)

    def _pkt(self, to_server: bool, flags: str, data: bytes = b"") -> bytes:
        if to_server:
            head = ip(self.client, self.server)
            tcp = TCP(sport=self.cport, dport=self.sport, flags=flags, seq=self.cseq, ack=self.sseq)
        else:
            head = ip(self.server, self.client)
            tcp = TCP(sport=self.sport, dport=self.cport, flags=flags, seq=self.sseq, ack=self.cseq)
        raw = bytes(head / tcp / Raw(data)) if data else bytes(head / tcp)
        self.packets.append(raw)
        return raw

    def handshake(self) -> list[bytes]:
        out = [self._pkt(True, "S")]
        self.cseq += 1
        out.append(self._pkt(False, "SA"))
        self.sseq += 1
        out.append(self._pkt(True, "A"))
        return out

    def send(self, to_server: bool, data: bytes, mss: int = 1400, flags: str = "PA") -> list[bytes]:
        out = []
        for i in range(0, len(data), mss):
            chunk = data[i : i + mss]
            out.append(self._pkt(to_server, flags, chunk))
            if to_server:
                self.cseq += len(chunk)
            else:
                self.sseq += len(chunk)
        return out

    def fin(self, to_server: bool) -> bytes:
        raw = self._pkt(to_server, "FA")
        if to_server:
            self.cseq += 1
        else:
            self.sseq += 1
        return raw


def udp(src: str, dst: str, sport: int, dport: int, data: bytes) -> bytes:
    return bytes(ip(src, dst) / UDP(sport=sport, dport=dport) / Raw(data))


def http_get(path: str = "/", host: str = "example.test", extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode()


def http_response(body: bytes, chunked: bool = False, ctype: str = "text/plain") -> bytes:
    if chunked:
        parts = b"".join(
            b"%x\r\n%s\r\n" % (len(body[i : i + 7]), body[i : i + 7])
            for i in range(0, len(body), 7)
        )
        head = f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nTransfer-Encoding: chunked\r\n\r\n"
        return head.encode() + parts + b"0\r\n\r\n"
    head = f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body
