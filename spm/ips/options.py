"""Interpretation of Snort 3 rule options (the body of a rule, between the parentheses) into
what the built-in engine evaluates. The rule *file* is split into raw rules by
`opengate.snort.rules`; this module only gives meaning to their options.

Supported: msg, sid, gid, rev, classtype, priority, metadata, reference, service, rem, target;
content (with !, |hex|, nocase, offset, depth, distance, within, fast_pattern and its _offset/
_length); pcre (i s m x A E G R O, translated to Python's re: POSIX classes, \\z and \\Z,
(?<name>...), mid-pattern (?-i), ungreedy G; Snort 2 buffer flags are refused); byte_test,
byte_jump, isdataat, bufferlen, dsize; flow (to_server, to_client, from_server, from_client,
established, not_established, stateless, no_stream, only_stream); flags, itype, icode, icmp_id,
icmp_seq, ip_proto, ttl, id, seq, ack, window; flowbits (set, setx, unset, toggle, isset,
isnotset, reset, noalert); detection_filter; the sticky buffers pkt_data, raw_data, file_data,
http_uri, http_raw_uri, http_header, http_raw_header (both with `field NAME`), http_method,
http_cookie, http_raw_cookie, http_client_body, http_raw_body, http_stat_code, http_stat_msg,
http_version, http_raw_request, http_raw_status.

Everything else (dce_*, sip_*, ssl_*, asn1, base64_*, byte_extract and variables, fragbits,
tag, ...) makes the rule unsupported: it is listed with the option, its file and line, and not
loaded; a rule is never loaded with an option silently ignored.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from spm.ips.base import RuleInfo
from spm.ips.option_types import (
    BUFFERS,
    FIELD_BUFFERS,
    PKT_DATA,
    BufferLen,
    ByteJump,
    ByteTest,
    CompiledRule,
    Content,
    DetectionFilter,
    Flowbit,
    FlowOpt,
    IsDataAt,
    PayloadOption,
    Pcre,
    RawRuleLike,
    UnsupportedOptionError,
)
from spm.packet import Packet

# --- value parsing ------------------------------------------------------------------------------

_CLASS_PRIORITY = {
    "attempted-admin": 1,
    "attempted-user": 1,
    "inappropriate-content": 1,
    "policy-violation": 1,
    "shellcode-detect": 1,
    "successful-admin": 1,
    "successful-user": 1,
    "trojan-activity": 1,
    "unsuccessful-user": 1,
    "web-application-attack": 1,
    "file-format": 1,
    "malware-cnc": 1,
    "client-side-exploit": 1,
    "server-side-exploit": 1,
    "exploit-kit": 1,
    "attempted-dos": 2,
    "attempted-recon": 2,
    "bad-unknown": 2,
    "default-login-attempt": 2,
    "denial-of-service": 2,
    "misc-attack": 2,
    "non-standard-protocol": 2,
    "rpc-portmap-decode": 2,
    "successful-dos": 2,
    "successful-recon-largescale": 2,
    "successful-recon-limited": 2,
    "suspicious-filename-detect": 2,
    "suspicious-login": 2,
    "system-call-detect": 2,
    "unusual-client-port-connection": 2,
    "web-application-activity": 2,
    "sdf": 2,
    "icmp-event": 3,
    "misc-activity": 3,
    "network-scan": 3,
    "not-suspicious": 3,
    "protocol-command-decode": 3,
    "string-detect": 3,
    "unknown": 3,
    "tcp-connection": 4,
}


def parse_content_string(text: str) -> tuple[bytes, str]:
    """A quoted Snort string with |hex| parts and backslash escapes; returns (bytes, rest)."""
    text = text.lstrip()
    if not text.startswith('"'):
        raise ValueError("expected a quoted string")
    out = bytearray()
    i = 1
    hex_mode = False
    hex_buf = ""
    while i < len(text):
        ch = text[i]
        if hex_mode:
            if ch == "|":
                digits = hex_buf.replace(" ", "")
                if len(digits) % 2 or not re.fullmatch(r"[0-9A-Fa-f]*", digits):
                    raise ValueError(f"bad hex bytes |{hex_buf}|")
                out += bytes.fromhex(digits)
                hex_mode, hex_buf = False, ""
            else:
                hex_buf += ch
            i += 1
            continue
        if ch == "\\" and i + 1 < len(text):
            out += text[i + 1].encode("latin-1", "replace")
            i += 2
            continue
        if ch == "|":
            hex_mode = True
            i += 1
            continue
        if ch == '"':
            return bytes(out), text[i + 1 :]
        out += ch.encode("utf-8")
        i += 1
    raise ValueError("unterminated string" if not hex_mode else "unterminated |hex|")


def _int(text: str, option: str) -> int:
    try:
        return int(text.strip(), 0)
    except ValueError:
        raise UnsupportedOptionError(
            option, f"{text.strip()!r} is not a number (variables are not supported)"
        ) from None


def _split(value: str) -> list[str]:
    return [p.strip() for p in value.split(",") if p.strip()]


def numeric_check(text: str, option: str) -> Callable[[int], bool]:
    """`N`, `<N`, `>N`, `<=N`, `>=N`, `!N`, `=N`, `A<>B` (exclusive), `A<=>B` (inclusive)."""
    t = text.replace(" ", "")
    m = re.fullmatch(r"(-?\w+)<=>(-?\w+)", t)
    if m:
        lo, hi = _int(m.group(1), option), _int(m.group(2), option)
        return lambda x: lo <= x <= hi
    m = re.fullmatch(r"(-?\w+)<>(-?\w+)", t)
    if m:
        lo, hi = _int(m.group(1), option), _int(m.group(2), option)
        return lambda x: lo < x < hi
    m = re.fullmatch(r"(<=|>=|<|>|!=|!|=)?(-?\w+)", t)
    if not m:
        raise UnsupportedOptionError(option, f"cannot read {text!r}")
    op, n = m.group(1) or "=", _int(m.group(2), option)
    return {
        "=": lambda x: x == n,
        "!": lambda x: x != n,
        "!=": lambda x: x != n,
        "<": lambda x: x < n,
        ">": lambda x: x > n,
        "<=": lambda x: x <= n,
        ">=": lambda x: x >= n,
    }[op]


_POSIX = {
    "alpha": "a-zA-Z",
    "digit": "0-9",
    "alnum": "a-zA-Z0-9",
    "upper": "A-Z",
    "lower": "a-z",
    "space": r" \t\n\r\f\v",
    "xdigit": "0-9A-Fa-f",
    "punct": r"!-/:-@\[-`{-~",
    "print": r" -~",
    "graph": r"!-~",
    "cntrl": r"\x00-\x1f\x7f",
    "blank": r" \t",
    "word": r"\w",
}


def _scope_inline_flags(pattern: str) -> str:
    """PCRE allows `(?-i)` mid-pattern (to the end of the group); Python only at the start, or
    scoped as `(?-i:...)`. Top-level ones are rewritten to a group running to the end."""
    out: list[str] = []
    depth = 0
    closers = 0
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if ch == "[":  # a class: copy up to its closing bracket
            j = i + 1
            if j < len(pattern) and pattern[j] == "^":
                j += 1
            if j < len(pattern) and pattern[j] == "]":
                j += 1
            while j < len(pattern) and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            out.append(pattern[i : j + 1])
            i = j + 1
            continue
        m = re.match(r"\(\?([a-zA-Z]*-[a-zA-Z]+|[a-zA-Z]+)\)", pattern[i:])
        if m and depth == 0 and i > 0:
            out.append(f"(?{m.group(1)}:")
            closers += 1
            i += m.end()
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        out.append(ch)
        i += 1
    return "".join(out) + ")" * closers


_QUANT = re.compile(r"\{\d+(?:,\d*)?\}")


def swap_greediness(pattern: str) -> str:
    """PCRE's G flag (ungreedy): every quantifier's greediness is inverted."""
    out: list[str] = []
    i = 0
    in_class = False
    n = len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
            out.append(ch)
            i += 1
            continue
        if ch == "[":
            in_class = True
            out.append(ch)
            i += 1
            if i < n and pattern[i] == "^":
                out.append("^")
                i += 1
            if i < n and pattern[i] == "]":
                out.append("]")
                i += 1
            continue
        if ch == "(" and i + 1 < n and pattern[i + 1] == "?":
            out.append("(?")
            i += 2
            continue
        quant = ""
        if ch in "*+?":
            quant = ch
        elif ch == "{" and (m := _QUANT.match(pattern, i)):
            quant = m.group(0)
        if not quant:
            out.append(ch)
            i += 1
            continue
        out.append(quant)
        i += len(quant)
        if i < n and pattern[i] == "?":
            i += 1  # lazy becomes greedy
        elif i < n and pattern[i] == "+":
            out.append("+")  # possessive stays possessive
            i += 1
        else:
            out.append("?")
    return "".join(out)


def pcre_to_python(pattern: str) -> str:
    """The PCRE constructs Python's `re` spells differently."""
    pattern = _scope_inline_flags(pattern)
    pattern = re.sub(r"\[:(\w+):\]", lambda m: _POSIX.get(m.group(1), m.group(0)), pattern)
    pattern = pattern.replace("(?<", "(?P<").replace("(?P<=", "(?<=").replace("(?P<!", "(?<!")
    # PCRE's \Z is "end, or before a final newline", its \z "end"; Python's \Z is PCRE's \z
    pattern = re.sub(r"(?<!\\)((?:\\\\)*)\\Z", "\\1(?=\\\\n?\\\\Z)", pattern)
    pattern = re.sub(r"(?<!\\)((?:\\\\)*)\\z", "\\1\\\\Z", pattern)
    return pattern


def compile_pcre(value: str, buffer: str, fld: str | None) -> Pcre:
    v = value.strip()
    negated = v.startswith("!")
    if negated:
        v = v[1:].strip()
    if len(v) < 2 or v[0] != '"' or v[-1] != '"':
        raise UnsupportedOptionError("pcre", "expected a quoted /regex/flags")
    body = v[1:-1]
    if not body.startswith("/") or body.rfind("/") == 0:
        raise UnsupportedOptionError("pcre", "expected /regex/flags")
    end = body.rfind("/")
    pattern, flags = body[1:end], body[end + 1 :]
    pattern = pattern.replace('\\"', '"')
    re_flags = 0
    relative = anchored = False
    for f in flags:
        if f == "i":
            re_flags |= re.IGNORECASE
        elif f == "s":
            re_flags |= re.DOTALL
        elif f == "m":
            re_flags |= re.MULTILINE
        elif f == "x":
            re_flags |= re.VERBOSE
        elif f == "R":
            relative = True
        elif f == "A":
            anchored = True
        elif f in "EGO":
            pass  # E: $ at the very end only (approximated), G: ungreedy (rare), O: override
        else:
            raise UnsupportedOptionError(
                "pcre", f"flag {f!r} (Snort 2 buffer flags are not Snort 3)"
            )
    if "G" in flags:
        pattern = swap_greediness(pattern)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # e.g. "possible nested set": a PCRE-only construct
            regex = re.compile(pcre_to_python(pattern).encode("latin-1"), re_flags)
    except (re.error, UnicodeEncodeError, FutureWarning, DeprecationWarning) as exc:
        raise UnsupportedOptionError("pcre", f"regex not supported by Python re: {exc}") from None
    return Pcre(regex, buffer, fld, negated, relative, anchored, source=value)


def _endian_and_base(parts: list[str], option: str) -> tuple[bool, int, int | None, set[str]]:
    big = True
    base = 0
    bitmask: int | None = None
    flags: set[str] = set()
    i = 0
    while i < len(parts):
        p = parts[i]
        words = p.split()
        if p in ("big", "little"):
            big = p == "big"
        elif p == "string" or words[0] == "string":
            kind = words[1] if len(words) > 1 else (parts[i + 1] if i + 1 < len(parts) else "dec")
            if len(words) == 1 and i + 1 < len(parts) and parts[i + 1] in ("hex", "dec", "oct"):
                i += 1
            base = {"hex": 16, "dec": 10, "oct": 8}.get(kind, 10)
        elif p in ("hex", "dec", "oct"):
            base = {"hex": 16, "dec": 10, "oct": 8}[p]
        elif words[0] == "bitmask":
            bitmask = _int(words[1], option)
        elif p == "dce":
            raise UnsupportedOptionError(option, "dce (DCE/RPC endianness) is not supported")
        else:
            flags.add(words[0])
            if len(words) > 1:
                flags.add(p)
        i += 1
    return big, base, bitmask, flags


def compile_byte_test(value: str, buffer: str, fld: str | None) -> ByteTest:
    parts = _split(value)
    if len(parts) < 4:
        raise UnsupportedOptionError("byte_test", "needs count, operator, value, offset")
    count = _int(parts[0], "byte_test")
    op = parts[1].replace(" ", "")
    negated = op.startswith("!") and len(op) > 1
    if negated:
        op = op[1:]
    if op not in ("<", ">", "<=", ">=", "=", "&", "^"):
        raise UnsupportedOptionError("byte_test", f"operator {parts[1]!r}")
    val = _int(parts[2], "byte_test")
    offset = _int(parts[3], "byte_test")
    big, base, bitmask, flags = _endian_and_base(parts[4:], "byte_test")
    unknown = flags - {"relative"}
    if unknown:
        raise UnsupportedOptionError("byte_test", f"argument {sorted(unknown)[0]!r}")
    if not 1 <= count <= (10 if base else 4):
        raise UnsupportedOptionError("byte_test", f"count {count}")
    return ByteTest(
        buffer, fld, count, op, negated, val, offset, "relative" in flags, big, base, bitmask
    )


def compile_byte_jump(value: str, buffer: str, fld: str | None) -> ByteJump:
    parts = _split(value)
    if len(parts) < 2:
        raise UnsupportedOptionError("byte_jump", "needs count and offset")
    count = _int(parts[0], "byte_jump")
    offset = _int(parts[1], "byte_jump")
    multiplier, post = 1, 0
    rest: list[str] = []
    for p in parts[2:]:
        words = p.split()
        if words[0] == "multiplier":
            multiplier = _int(words[1], "byte_jump")
        elif words[0] == "post_offset":
            post = _int(words[1], "byte_jump")
        else:
            rest.append(p)
    big, base, bitmask, flags = _endian_and_base(rest, "byte_jump")
    unknown = flags - {"relative", "align", "from_beginning", "from_end"}
    if unknown:
        raise UnsupportedOptionError("byte_jump", f"argument {sorted(unknown)[0]!r}")
    if not 0 <= count <= (10 if base else 4):
        raise UnsupportedOptionError("byte_jump", f"count {count}")
    return ByteJump(
        buffer,
        fld,
        count,
        offset,
        "relative" in flags,
        big,
        base,
        multiplier,
        "align" in flags,
        "from_beginning" in flags,
        "from_end" in flags,
        post,
        bitmask,
    )


def compile_flow(value: str) -> FlowOpt:
    to_server: bool | None = None
    established: bool | None = None
    stream: str | None = None
    for p in _split(value):
        if p in ("to_server", "from_client"):
            to_server = True
        elif p in ("to_client", "from_server"):
            to_server = False
        elif p == "established":
            established = True
        elif p == "not_established":
            established = False
        elif p == "stateless":
            pass
        elif p == "no_stream":
            stream = "no"
        elif p == "only_stream":
            stream = "only"
        else:
            raise UnsupportedOptionError("flow", f"argument {p!r}")
    return FlowOpt(to_server, established, stream)


_TCP_FLAG_BITS = {
    "F": 0x01,
    "S": 0x02,
    "R": 0x04,
    "P": 0x08,
    "A": 0x10,
    "U": 0x20,
    "E": 0x40,
    "C": 0x80,
    "2": 0x40,
    "1": 0x80,
}


def compile_flags(value: str) -> Callable[[Packet], bool]:
    spec, _, mask_txt = value.replace(" ", "").partition(",")
    mod = ""
    if spec[:1] in ("!", "*", "+"):
        mod, spec = spec[0], spec[1:]
    if spec[-1:] in ("!", "*", "+"):
        mod, spec = spec[-1], spec[:-1]
    bits = 0
    for ch in spec:
        if ch == "0":
            continue
        if ch not in _TCP_FLAG_BITS:
            raise UnsupportedOptionError("flags", f"flag {ch!r}")
        bits |= _TCP_FLAG_BITS[ch]
    ignore = 0
    for ch in mask_txt:
        if ch not in _TCP_FLAG_BITS:
            raise UnsupportedOptionError("flags", f"mask flag {ch!r}")
        ignore |= _TCP_FLAG_BITS[ch]
    keep = 0xFF & ~ignore

    def check(pkt: Packet) -> bool:
        if not pkt.is_tcp:
            return False
        f = pkt.tcp_flags & keep
        if mod == "+":
            return f & bits == bits
        if mod == "*":
            return bool(f & bits) or bits == 0
        if mod == "!":
            return f & bits == 0
        return f == bits

    return check


def _packet_field(option: str, value: str) -> Callable[[Packet], bool]:
    check = numeric_check(value, option)
    getters: dict[str, Callable[[Packet], int]] = {
        "itype": lambda p: p.icmp_type,
        "icode": lambda p: p.icmp_code,
        "icmp_id": lambda p: p.icmp_id,
        "icmp_seq": lambda p: p.icmp_seq,
        "ttl": lambda p: p.ttl,
        "id": lambda p: p.ip_id,
        "seq": lambda p: p.seq,
        "ack": lambda p: p.ack,
        "window": lambda p: p.window,
        "dsize": lambda p: len(p.payload),
    }
    get = getters[option]
    icmp = option.startswith(("itype", "icode", "icmp_"))
    tcp = option in ("seq", "ack", "window")

    def pred(pkt: Packet) -> bool:
        if icmp and pkt.icmp_type < 0:
            return False
        if tcp and not pkt.is_tcp:
            return False
        return check(get(pkt))

    return pred


_IP_PROTOS = {
    "icmp": 1,
    "igmp": 2,
    "tcp": 6,
    "udp": 17,
    "gre": 47,
    "esp": 50,
    "ah": 51,
    "ipv6-icmp": 58,
    "sctp": 132,
}


def compile_ip_proto(value: str) -> Callable[[Packet], bool]:
    v = value.strip()
    op = ""
    if v[:1] in ("!", "<", ">"):
        op, v = v[0], v[1:].strip()
    n = _IP_PROTOS.get(v.lower())
    if n is None:
        n = _int(v, "ip_proto")
    return {
        "": lambda p: p.proto == n,
        "!": lambda p: p.proto != n,
        "<": lambda p: p.proto < n,
        ">": lambda p: p.proto > n,
    }[op]


def compile_flowbits(value: str | None) -> Flowbit:
    parts = _split(value or "")
    if not parts:
        raise UnsupportedOptionError("flowbits", "no operation")
    op = parts[0]
    if op == "noalert":
        return Flowbit("noalert")
    if op == "reset":
        return Flowbit("reset", group=parts[1] if len(parts) > 1 else None)
    if op not in ("set", "setx", "unset", "toggle", "isset", "isnotset"):
        raise UnsupportedOptionError("flowbits", f"operation {op!r}")
    if len(parts) < 2:
        raise UnsupportedOptionError("flowbits", f"{op} needs a name")
    spec = parts[1]
    all_of = "|" not in spec
    names = tuple(n.strip() for n in re.split(r"[|&]", spec) if n.strip())
    return Flowbit(op, names, all_of, parts[2] if len(parts) > 2 else None)


def compile_detection_filter(value: str) -> DetectionFilter:
    track = count = seconds = None
    for p in _split(value):
        words = p.split()
        if len(words) != 2:
            raise UnsupportedOptionError("detection_filter", f"argument {p!r}")
        if words[0] == "track":
            track = words[1]
        elif words[0] == "count":
            count = _int(words[1], "detection_filter")
        elif words[0] == "seconds":
            seconds = _int(words[1], "detection_filter")
        else:
            raise UnsupportedOptionError("detection_filter", f"argument {p!r}")
    if track not in ("by_src", "by_dst") or count is None or seconds is None:
        raise UnsupportedOptionError(
            "detection_filter", "needs track by_src|by_dst, count, seconds"
        )
    return DetectionFilter(track == "by_src", count, float(seconds))


# --- the rule -----------------------------------------------------------------------------------

_IGNORED = frozenset(
    {
        "reference",
        "metadata",
        "rem",
        "target",
        "classtype",
        "msg",
        "sid",
        "gid",
        "rev",
        "priority",
        "service",
    }
)
_PACKET_FIELDS = frozenset(
    {"itype", "icode", "icmp_id", "icmp_seq", "ttl", "id", "seq", "ack", "window", "dsize"}
)
_CONTENT_MODIFIERS = frozenset(
    {
        "nocase",
        "offset",
        "depth",
        "distance",
        "within",
        "fast_pattern",
        "fast_pattern_offset",
        "fast_pattern_length",
        "fast_pattern_only",
    }
)


def _unquote(value: str | None) -> str:
    v = (value or "").strip()
    if len(v) >= 2 and v[0] == '"' and v[-1] == '"':
        v = v[1:-1]
    return v.replace('\\"', '"').replace("\\;", ";").replace("\\\\", "\\")


def _content(value: str, buffer: str, fld: str | None) -> Content:
    v = value.strip()
    negated = v.startswith("!")
    if negated:
        v = v[1:]
    try:
        pattern, rest = parse_content_string(v)
    except ValueError as exc:
        raise UnsupportedOptionError("content", str(exc)) from None
    if not pattern:
        raise UnsupportedOptionError("content", "empty pattern")
    mods: dict[str, int | bool] = {}
    for p in _split(rest):
        words = p.split()
        name = words[0]
        if name not in _CONTENT_MODIFIERS:
            raise UnsupportedOptionError("content", f"modifier {name!r}")
        if name in ("nocase", "fast_pattern", "fast_pattern_only"):
            mods[name] = True
        elif len(words) != 2:
            raise UnsupportedOptionError("content", f"modifier {p!r}")
        else:
            mods[name] = _int(words[1], f"content {name}")
    return _with_mods(Content(pattern, buffer, fld, negated), mods)


def _with_mods(c: Content, mods: dict[str, int | bool]) -> Content:
    def num(key: str, current: int | None) -> int | None:
        v = mods.get(key)
        return current if v is None else int(v)

    return Content(
        c.pattern,
        c.buffer,
        c.field,
        c.negated,
        bool(mods.get("nocase", c.nocase)),
        num("offset", c.offset),
        num("depth", c.depth),
        num("distance", c.distance),
        num("within", c.within),
        bool(mods.get("fast_pattern") or mods.get("fast_pattern_only") or c.fast_pattern),
    )


def _buffer_option(name: str, value: str | None) -> tuple[str, str | None]:
    fld: str | None = None
    if value:
        words = value.split()
        if name in FIELD_BUFFERS and len(words) == 2 and words[0] == "field":
            fld = words[1].lower()
        elif name == "http_uri" and value.strip() in ("", "path", "query"):
            pass  # URI parts: the whole URI is searched (a superset)
        else:
            raise UnsupportedOptionError(name, f"sub-option {value!r}")
    return ("pkt_data" if name == "raw_data" else name), fld


def compile_rule(raw: RawRuleLike) -> CompiledRule:
    """Interpret a raw rule's options. Raises `UnsupportedOptionError` naming the first option
    that the engine cannot evaluate."""
    sid, gid, rev = 0, 1, 1
    msg = classtype = ""
    priority: int | None = None
    services: set[str] = set()
    flow = FlowOpt()
    checks: list[Callable[[Packet], bool]] = []
    payload: list[PayloadOption] = []
    flowbits: list[Flowbit] = []
    dfilter: DetectionFilter | None = None
    buffer, fld = PKT_DATA, None
    for opt in raw.options:
        name, value = opt.name, opt.value
        if name == "msg":
            msg = _unquote(value)
        elif name == "sid":
            sid = _int(value or "", "sid")
        elif name == "gid":
            gid = _int(value or "", "gid")
        elif name == "rev":
            rev = _int(value or "", "rev")
        elif name == "classtype":
            classtype = (value or "").strip()
        elif name == "priority":
            priority = _int(value or "", "priority")
        elif name == "service":
            services.update(s.strip() for s in (value or "").split(",") if s.strip())
        elif name in _IGNORED:
            continue
        elif name in BUFFERS:
            buffer, fld = _buffer_option(name, value)
        elif name == "content":
            payload.append(_content(value or "", buffer, fld))
        elif name in _CONTENT_MODIFIERS:  # Snort 2 style: a separate option after the content
            if not payload or not isinstance(payload[-1], Content):
                raise UnsupportedOptionError(name, "modifier without a content before it")
            mods: dict[str, int | bool] = (
                {name: True} if value is None else {name: _int(value, name)}
            )
            payload[-1] = _with_mods(payload[-1], mods)
        elif name == "pcre":
            payload.append(compile_pcre(value or "", buffer, fld))
        elif name == "byte_test":
            payload.append(compile_byte_test(value or "", buffer, fld))
        elif name == "byte_jump":
            payload.append(compile_byte_jump(value or "", buffer, fld))
        elif name == "isdataat":
            v = (value or "").replace(" ", "")
            parts = v.split(",")
            neg = parts[0].startswith("!")
            extra = set(parts[1:]) - {"relative", "rawbytes"}
            if extra:
                raise UnsupportedOptionError("isdataat", f"argument {sorted(extra)[0]!r}")
            size = _int(parts[0].lstrip("!"), "isdataat")
            payload.append(IsDataAt(buffer, fld, size, "relative" in parts[1:], neg))
        elif name == "bufferlen":
            v = (value or "").strip()
            relative = v.endswith(",relative")
            if relative:
                v = v[: -len(",relative")]
            payload.append(BufferLen(buffer, fld, numeric_check(v, "bufferlen"), relative))
        elif name == "flow":
            flow = compile_flow(value or "")
        elif name == "flags":
            checks.append(compile_flags(value or ""))
        elif name in _PACKET_FIELDS:
            checks.append(_packet_field(name, value or ""))
        elif name == "ip_proto":
            checks.append(compile_ip_proto(value or ""))
        elif name == "flowbits":
            flowbits.append(compile_flowbits(value))
        elif name == "detection_filter":
            dfilter = compile_detection_filter(value or "")
        else:
            raise UnsupportedOptionError(name, "option not supported by the built-in engine")
    if sid <= 0:
        raise UnsupportedOptionError("sid", "missing or not positive")
    action = raw.action
    if action not in ("alert", "drop", "block", "reject", "pass", "log", "sdrop", "rewrite"):
        raise UnsupportedOptionError("action", f"{action!r}")
    if action == "rewrite":
        raise UnsupportedOptionError("action", "rewrite (replace) is not supported")
    info = RuleInfo(
        gid,
        sid,
        rev,
        msg,
        classtype,
        action,
        priority if priority is not None else _CLASS_PRIORITY.get(classtype, 3),
    )
    proto = (raw.proto or "ip").lower()
    rule = CompiledRule(
        info=info,
        proto=proto,
        path=raw.path,
        line=raw.line,
        services=frozenset(services),
        flow=flow,
        packet_checks=tuple(checks),
        payload=tuple(payload),
        flowbits=tuple(flowbits),
        detection_filter=dfilter,
        buffers=frozenset(p.buffer for p in payload),
    )
    rule.fast_pattern = choose_fast_pattern(rule.payload)
    return rule


def choose_fast_pattern(payload: Sequence[PayloadOption]) -> Content | None:
    """The content the multi-pattern prefilter looks for: the one marked fast_pattern, else the
    longest positive one (its presence is necessary for the rule to match)."""
    contents = [p for p in payload if isinstance(p, Content) and not p.negated]
    if not contents:
        return None
    marked = [c for c in contents if c.fast_pattern]
    if marked:
        return marked[0]
    return max(contents, key=lambda c: len(c.pattern))


@dataclass(slots=True)
class UnsupportedRule:
    path: str
    line: int
    sid: int
    option: str
    reason: str


@dataclass(slots=True)
class LoadReport:
    loaded: int = 0
    disabled: int = 0
    unsupported: list[UnsupportedRule] = field(default_factory=list)

    def unsupported_by_option(self) -> Counter[str]:
        return Counter(u.option for u in self.unsupported)
