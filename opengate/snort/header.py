"""Snort 3 rule headers: variables, address and port expressions, service transports.

Header semantics (as Snort has them):

* addresses: `any`, `a.b.c.d`, `a.b.c.d/len`, `$VAR`, lists `[x, y]`, negation `!x`; a list
  matches its positive items minus its negated ones (all addresses minus the negated ones when
  it has no positive item). `addresses` gives the IPv4 part (the fast path classifies IPv4):
  IPv6 items are dropped, a negated IPv6 item restricts nothing, a rule left without any IPv4
  address cannot match and is reported. `address_intervals(..., family=6)` gives the IPv6 part
  the same way (IPv4 items dropped; `a:b::c`, `a:b::/len`), for the SPM's engine.
* ports: `any`, `N`, `N:M`, `N:`, `:M`, `$VAR`, lists and negation alike. For `ip` and `icmp`
  rules Snort ignores the ports, and so do we (reported if they were not `any`).
* direction `->`, or `<>` (both ways: compiled as two terms with the same rule id).
* protocol: ip (any), tcp, udp, icmp; a service name (`alert http ...`, or a service rule
  without header such as `alert http ( ... )`, `alert file ( ... )`) stands for the transports
  that service runs on (SERVICE_TRANSPORTS; http -> tcp, dns -> tcp+udp, `file` -> tcp+udp,
  an unknown service -> any IP protocol), and a service rule matches any addresses and ports of
  those transports. A rule with no protocol at all (`alert ( ... )`) matches every packet.

Variables default to Snort 3's snort_defaults.lua (HOME_NET and EXTERNAL_NET are `any`); a
variable's value may be a Snort 2 list (`[80,443]`) or a Snort 3 space-separated one (`80 443`).
Errors (unknown variable, malformed address, reversed port range...) are ConfigErrors naming the
rules file, line and field.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from opengate.errors import ConfigError
from opengate.fields import (
    ADDR_MAX,
    ANY_ADDR,
    ANY_PROTO,
    PORT_MAX,
    Intervals,
    Prefix,
    ProtoMatch,
    complement,
    intervals_to_prefixes,
    normalize,
    parse_prefix,
    subtract,
)

LOG = logging.getLogger(__name__)

_HTTP_PORTS = (
    "80 81 311 383 591 593 901 1220 1414 1741 1830 2301 2381 2809 3037 3128 3702 4343 4848 5250 "
    "6988 7000 7001 7144 7145 7510 7777 7779 8000 8008 8014 8028 8080 8085 8088 8090 8118 8123 "
    "8180 8181 8243 8280 8300 8800 8888 8899 9000 9060 9080 9090 9091 9443 9999 11371 34443 "
    "34444 41080 50002 55555"
)
SNORT3_DEFAULT_VARIABLES: Mapping[str, str] = {
    "HOME_NET": "any",
    "EXTERNAL_NET": "any",
    "DNS_SERVERS": "$HOME_NET",
    "SMTP_SERVERS": "$HOME_NET",
    "HTTP_SERVERS": "$HOME_NET",
    "SQL_SERVERS": "$HOME_NET",
    "TELNET_SERVERS": "$HOME_NET",
    "SSH_SERVERS": "$HOME_NET",
    "FTP_SERVERS": "$HOME_NET",
    "SIP_SERVERS": "$HOME_NET",
    "AIM_SERVERS": (
        "64.12.24.0/23 64.12.28.0/23 64.12.161.0/24 64.12.163.0/24 64.12.200.0/24 "
        "205.188.3.0/24 205.188.5.0/24 205.188.7.0/24 205.188.9.0/24 205.188.153.0/24 "
        "205.188.179.0/24 205.188.248.0/24"
    ),
    "HTTP_PORTS": _HTTP_PORTS,
    "SHELLCODE_PORTS": "!80",
    "ORACLE_PORTS": "1024:",
    "SSH_PORTS": "22",
    "FTP_PORTS": "21 2100 3535",
    "SIP_PORTS": "5060 5061 5600",
    "MAIL_PORTS": "110 143",
    "FILE_DATA_PORTS": _HTTP_PORTS + " 110 143",
    "GTP_PORTS": "2123 2152 3386",
    "RPC_PORTS": "111 32770 32771 32772 32773 32774 32775 32776 32777 32778 32779",
}

PROTOCOLS: Mapping[str, tuple[ProtoMatch, ...]] = {
    "ip": ANY_PROTO,
    "tcp": (ProtoMatch(6),),
    "udp": (ProtoMatch(17),),
    "icmp": (ProtoMatch(1),),
}
_TCP, _UDP = (ProtoMatch(6),), (ProtoMatch(17),)
_BOTH = (ProtoMatch(6), ProtoMatch(17))
SERVICE_TRANSPORTS: Mapping[str, tuple[ProtoMatch, ...]] = {
    **{
        name: _TCP
        for name in (
            "http",
            "http2",
            "http3",
            "ftp",
            "ftp-data",
            "smtp",
            "pop3",
            "imap",
            "ssl",
            "ssh",
            "telnet",
            "netbios-ssn",
            "smb",
            "mysql",
            "oracle",
            "irc",
            "ldap",
            "nntp",
            "vnc",
            "rdp",
            "rtsp",
            "modbus",
            "s7commplus",
            "mms",
            "iec104",
            "cip",
            "x11",
            "finger",
            "pop2",
            "imap4",
            "sunrpc-tcp",
            "mssql",
            "postgresql",
            "bgp",
        )
    },
    **{
        name: _UDP
        for name in (
            "snmp",
            "tftp",
            "ntp",
            "netbios-dgm",
            "netbios-ns",
            "isakmp",
            "gtp",
            "dhcp",
            "bootp",
            "rip",
            "syslog",
            "wins",
        )
    },
    **{
        name: _BOTH
        for name in ("dns", "sip", "dcerpc", "kerberos", "dnp3", "sunrpc", "file", "rpc")
    },
}


# -- variables ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SnortVariables:
    """Name -> value text (address or port expression), without the `$`."""

    values: Mapping[str, str] = field(default_factory=lambda: dict(SNORT3_DEFAULT_VARIABLES))
    origin: str = "snort defaults"

    def with_values(self, values: Mapping[str, str], origin: str | None = None) -> SnortVariables:
        merged = dict(self.values)
        merged.update(values)
        return SnortVariables(merged, origin or self.origin)

    @classmethod
    def load(cls, path: str | Path, base: SnortVariables | None = None) -> SnortVariables:
        """A variables file: lines `NAME = value` (quotes optional), or Snort 2's `ipvar NAME
        value`, `portvar NAME value`, `var NAME value`; `#` and `--` start comments."""
        name = str(path)
        values: dict[str, str] = {}
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read variables: {exc.strerror}", path=name) from None
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith(("#", "--")):
                continue
            match = re.match(
                r"^(?:(?:ipvar|portvar|var)\s+)?([A-Za-z_]\w*)\s*(?:=\s*|\s+)(.+)$", line
            )
            if not match:
                raise ConfigError(
                    "expected 'NAME = value' or 'ipvar|portvar|var NAME value'",
                    path=name,
                    line=number,
                )
            value = match.group(2).strip().strip("'\"").strip()
            values[match.group(1)] = value
        return (base or cls()).with_values(values, origin=name)


def parse_assignment(text: str) -> tuple[str, str]:
    """`NAME=VALUE` as given on a command line."""
    name, sep, value = text.partition("=")
    name = name.strip().lstrip("$")
    if not sep or not re.match(r"^[A-Za-z_]\w*$", name):
        raise ConfigError(f"expected NAME=VALUE, got {text!r}", field="--var")
    return name, value.strip()


# -- expressions -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Context:
    variables: Mapping[str, str]
    path: str
    line: int
    field: str
    saw_ipv6: bool = False

    def error(self, message: str) -> ConfigError:
        return ConfigError(message, path=self.path, line=self.line, field=self.field)


def _tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char.isspace():
            i += 1
        elif char in "[],!":
            tokens.append(char)
            i += 1
        else:
            j = i
            while j < len(text) and not text[j].isspace() and text[j] not in "[],!":
                j += 1
            tokens.append(text[i:j])
            i = j
    return tokens


ADDR6_MAX = (1 << 128) - 1


class _Evaluator:
    """Evaluates an address or port expression to a set of integers (interval form); addresses
    of one family (4 or 6), the other family's items dropped."""

    def __init__(self, ctx: _Context, kind: str, family: int = 4) -> None:
        self.ctx = ctx
        self.kind = kind  # "addr" | "port"
        self.family = family
        self.maximum = PORT_MAX if kind == "port" else ADDR_MAX if family == 4 else ADDR6_MAX
        self.stack: tuple[str, ...] = ()

    def evaluate(self, text: str) -> Intervals:
        tokens = _tokenize(text)
        if not tokens:
            raise self.ctx.error("empty address or port expression")
        # A variable value may be a bare space-separated list (Snort 3 style): `80 443 8080`.
        if len(tokens) > 1 and "[" not in tokens and "," not in tokens:
            tokens = ["[", *_join_negations(tokens), "]"]
        pos, result = self._item(tokens, 0)
        if pos != len(tokens):
            raise self.ctx.error(f"unexpected {tokens[pos]!r} in {text.strip()!r}")
        return result

    def _item(self, tokens: Sequence[str], pos: int) -> tuple[int, Intervals]:
        if pos >= len(tokens):
            raise self.ctx.error("expression ends too early")
        token = tokens[pos]
        if token == "!":
            pos, inner = self._item(tokens, pos + 1)
            return pos, complement(inner, self.maximum)
        if token == "[":
            return self._list(tokens, pos + 1)
        if token in ("]", ","):
            raise self.ctx.error(f"unexpected {token!r}")
        return pos + 1, self._atom(token)

    def _list(self, tokens: Sequence[str], pos: int) -> tuple[int, Intervals]:
        positives: list[Intervals] = []
        negatives: list[Intervals] = []
        while True:
            if pos >= len(tokens):
                raise self.ctx.error("list is not closed with ']'")
            if tokens[pos] == "]" and not positives and not negatives:
                raise self.ctx.error("empty list []")
            negated = tokens[pos] == "!"
            if negated:
                pos, value = self._item(tokens, pos + 1)
                negatives.append(value)
            else:
                pos, value = self._item(tokens, pos)
                positives.append(value)
            if pos < len(tokens) and tokens[pos] == ",":
                pos += 1
                continue
            if pos < len(tokens) and tokens[pos] == "]":
                pos += 1
                break
            raise self.ctx.error("expected ',' or ']' in a list")
        base = (
            normalize(i for part in positives for i in part) if positives else ((0, self.maximum),)
        )
        minus = normalize(i for part in negatives for i in part)
        return pos, subtract(base, minus, self.maximum)

    def _atom(self, token: str) -> Intervals:
        if token == "any":
            return ((0, self.maximum),)
        if token.startswith("$"):
            name = token[1:]
            if name not in self.ctx.variables:
                raise self.ctx.error(f"unknown variable ${name}")
            if name in self.stack:
                raise self.ctx.error(f"variable ${name} refers to itself")
            self.stack = (*self.stack, name)
            try:
                return self.evaluate(self.ctx.variables[name])
            finally:
                self.stack = self.stack[:-1]
        if self.kind == "addr":
            return self._address(token)
        return self._port(token)

    def _address(self, token: str) -> Intervals:
        if self.family == 6:
            return self._address6(token)
        if ":" in token:  # IPv6: the IPv4 fast path never sees it
            self.ctx.saw_ipv6 = True
            return ()
        try:
            prefix = parse_prefix(token)
        except ValueError as exc:
            raise self.ctx.error(str(exc)) from None
        return ((prefix.first, prefix.last),)

    def _address6(self, token: str) -> Intervals:
        if ":" not in token:  # IPv4 (checked by the IPv4 evaluation): no IPv6 address
            return ()
        self.ctx.saw_ipv6 = True
        addr_text, slash, len_text = token.partition("/")
        try:
            addr = int(ipaddress.IPv6Address(addr_text))
        except ipaddress.AddressValueError as exc:
            raise self.ctx.error(f"malformed IPv6 prefix {token!r}: {exc}") from None
        if not slash:
            return ((addr, addr),)
        if not len_text.isdigit() or not 0 <= int(len_text) <= 128:
            raise self.ctx.error(f"malformed IPv6 prefix {token!r}: length must be 0..128")
        host = ADDR6_MAX >> int(len_text)  # host bits are masked off, as for IPv4
        return ((addr & ~host, addr | host),)

    def _port(self, token: str) -> Intervals:
        match = re.match(r"^(\d*)(:?)(\d*)$", token)
        if not match or (not match.group(1) and not match.group(3)):
            raise self.ctx.error(f"malformed port {token!r}")
        low_text, colon, high_text = match.groups()
        low = int(low_text) if low_text else 0
        high = (int(high_text) if high_text else PORT_MAX) if colon else low
        if low > PORT_MAX or high > PORT_MAX:
            raise self.ctx.error(f"port {max(low, high)} is above {PORT_MAX}")
        if low > high:
            raise self.ctx.error(f"port range {token} is reversed")
        return ((low, high),)


def _join_negations(tokens: Sequence[str]) -> list[str]:
    """`80 !81 [1,2]` -> `80 , ! 81 , [1,2]`: separate the items of a space-separated list."""
    out: list[str] = []
    depth = 0
    for token in tokens:
        if out and depth == 0 and out[-1] != "!":
            out.append(",")
        out.append(token)
        if token == "[":
            depth += 1
        elif token == "]":
            depth -= 1
    return out


def addresses(
    text: str, variables: Mapping[str, str], *, path: str = "<expr>", line: int = 0,
    field: str = "address",
) -> tuple[tuple[Prefix, ...], bool]:  # fmt: skip
    """(minimal prefixes, whether IPv6 items were dropped)."""
    ctx = _Context(variables, path, line, field)
    intervals = _Evaluator(ctx, "addr").evaluate(text)
    if intervals == ((0, ADDR_MAX),):
        return ANY_ADDR, ctx.saw_ipv6
    return intervals_to_prefixes(intervals), ctx.saw_ipv6


def address_intervals(
    text: str, variables: Mapping[str, str], family: int, *, path: str = "<expr>", line: int = 0,
    field: str = "address",
) -> Intervals:  # fmt: skip
    """The addresses of one family (4 or 6) an expression matches, as sorted disjoint inclusive
    intervals of integers; the other family's items are dropped (a negated one restricts
    nothing). Errors in either family's items raise ConfigError."""
    if family not in (4, 6):
        raise ValueError(f"address family {family} is not 4 or 6")
    ctx = _Context(variables, path, line, field)
    return _Evaluator(ctx, "addr", family).evaluate(text)


def ports(
    text: str, variables: Mapping[str, str], *, path: str = "<expr>", line: int = 0,
    field: str = "ports",
) -> Intervals:  # fmt: skip
    """The port set as sorted disjoint inclusive intervals (empty: no port)."""
    ctx = _Context(variables, path, line, field)
    return _Evaluator(ctx, "port").evaluate(text)
