"""The SPM's configuration file (YAML), validated with errors that name the file, line and field.

Example (every key but `name`, `interface` and `tags` has a default)::

    name: spm1
    interface: eth0
    tags: [1, 2, "100-199"]       # next-hop tags served, from the CPM (ints or "first-last")
    queue: {num: 0, length: 4096, fail_open: yes, backend: auto,   # backend: auto|nft|xt
            per_source: 1024, window: 64}   # held per source; packets at a worker at once
    workers: 2
    dispatch: jsq                 # hash2 | hash5 | jsq
    ips:
      enabled: yes
      engine: auto                # auto (snort if installed) | builtin | snort
      rules: [/etc/opengate/community.rules]
      variables: {HOME_NET: "[10.0.0.0/8,2001:db8:1::/48]", EXTERNAL_NET: "!$HOME_NET"}
                                  # both families may mix; quote IPv6 (YAML reads 1:2:3 as a number)
      alert_action: alert         # what a matching `alert` rule does inline: alert | drop
    av:
      enabled: yes                # with Snort inspecting, the AV runs after it (a second queue)
      clamd_socket: /run/clamav/clamd.ctl
      max_scan_size: 10485760
      timeout: 5.0
      on_clamd_down: accept       # accept | drop
      on_size_limit: accept       # accept | drop
      max_buffered: 67108864      # bytes buffered for scanning, all objects of a worker
    bypass: {classes: [tls], after_bytes: 1048576}
    limits: {max_flows: 65536, flow_timeout: 120, stream_flow_bytes: 262144,
             stream_total_bytes: 67108864, stream_segments: 2048, http_depth: 65536,
             inspect_total_bytes: 134217728}
    cpm_url: http://192.0.2.1:8080   # or unix:/run/opengate/cpm.sock
    token: secret
    eve_log: /var/log/opengate/eve.json
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opengate.errors import ConfigError
from opengate.yamlconf import Reader, as_bool, as_str, load_yaml, one_of

DISPATCH_SCHEMES = ("hash2", "hash5", "jsq")
QUEUE_BACKENDS = ("auto", "nft", "xt")
IPS_ENGINES = ("auto", "builtin", "snort")
POLICIES = ("accept", "drop")
ALERT_ACTIONS = ("alert", "drop")
# Flow classes the SPM recognises; `bypass.classes` may name these only.
BYPASS_CLASSES = ("tls", "ssh", "http", "dns", "other")

TAG_MAC_PREFIX = "02:4f:47:00"


@dataclass(frozen=True, slots=True)
class QueueConfig:
    num: int = 0
    length: int = 4096
    fail_open: bool = True
    backend: str = "auto"
    # The dispatcher holds packets in a fair queue (`opengate.fairqueue`) and hands each worker at
    # most `window` at a time; one source may hold `per_source` (more: the fail-open policy).
    per_source: int = 1024
    window: int = 64


@dataclass(frozen=True, slots=True)
class IpsConfig:
    enabled: bool = True
    engine: str = "auto"
    rules: tuple[str, ...] = ()
    variables: Mapping[str, str] = field(default_factory=dict)
    alert_action: str = "alert"


@dataclass(frozen=True, slots=True)
class AvConfig:
    enabled: bool = False
    clamd_socket: str = "/run/clamav/clamd.ctl"
    max_scan_size: int = 10 * 1024 * 1024
    timeout: float = 5.0
    on_clamd_down: str = "accept"
    on_size_limit: str = "accept"
    max_buffered: int = 64 * 1024 * 1024  # bytes all objects of a worker may hold for scanning


@dataclass(frozen=True, slots=True)
class BypassConfig:
    classes: tuple[str, ...] = ()
    after_bytes: int = 1024 * 1024


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    max_flows: int = 65536  # per worker
    flow_timeout: float = 120.0  # idle seconds before a flow is forgotten
    stream_flow_bytes: int = 256 * 1024  # out-of-order bytes buffered per flow direction
    stream_total_bytes: int = 64 * 1024 * 1024  # ... and in total per worker
    stream_segments: int = 2048  # out-of-order segments per flow direction
    http_depth: int = 64 * 1024  # HTTP body bytes the IPS inspects per message
    inspect_total_bytes: int = 128 * 1024 * 1024  # PDUs and bodies held by a worker, in total


@dataclass(frozen=True, slots=True)
class SpmConfig:
    name: str
    interface: str
    tags: tuple[int, ...]
    queue: QueueConfig = QueueConfig()
    workers: int = 1
    dispatch: str = "hash5"
    ips: IpsConfig = IpsConfig()
    av: AvConfig = AvConfig()
    bypass: BypassConfig = BypassConfig()
    limits: LimitsConfig = LimitsConfig()
    cpm_url: str | None = None
    token: str | None = None
    eve_log: str | None = None
    path: str = "<config>"


def tag_mac(tag: int) -> str:
    """The source MAC the NPM uses for a tag: 02:4f:47:00:TT:TT."""
    return f"{TAG_MAC_PREFIX}:{tag >> 8:02x}:{tag & 0xFF:02x}"


def load_config(path: str | Path) -> SpmConfig:
    return build_config(load_yaml(path), str(path))


def build_config(data: Any, path: str) -> SpmConfig:
    if data is None:
        raise ConfigError("the file is empty", path=path)
    top = Reader(path, data)
    cfg = SpmConfig(
        name=top.get("name", _name),
        interface=top.get("interface", _ifname),
        tags=_tags(top),
        queue=_section(top, "queue", _queue, QueueConfig()),
        workers=top.get("workers", _int_range(1, 64), 1),
        dispatch=top.get("dispatch", one_of(*DISPATCH_SCHEMES), "hash5"),
        ips=_section(top, "ips", _ips, IpsConfig()),
        av=_section(top, "av", _av, AvConfig()),
        bypass=_section(top, "bypass", _bypass, BypassConfig()),
        limits=_section(top, "limits", _limits, LimitsConfig()),
        cpm_url=top.get("cpm_url", _url, required=False),
        token=top.get("token", as_str, required=False),
        eve_log=top.get("eve_log", as_str, required=False),
        path=path,
    )
    top.reject_unknown()
    if cfg.cpm_url is not None and cfg.token is None:
        raise ConfigError(
            "is required when cpm_url is set", path=path, line=top.line_of("cpm_url"), field="token"
        )
    return cfg


# --- validation helpers -------------------------------------------------------------------------


def _section(top: Reader, key: str, build: Callable[[Reader], Any], default: Any) -> Any:
    if not top.has(key) or top.data[key] is None:
        top.get(key, lambda v: v, required=False)
        return default
    sub = top.sub(key)
    result = build(sub)
    sub.reject_unknown()
    return result


def _name(value: Any) -> str:
    x = as_str(value)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}", x):
        raise ValueError(f"{x!r} is not a valid name (letters, digits, '_', '-', '.'; max 32)")
    return x


def _ifname(value: Any) -> str:
    x = as_str(value)
    if len(x) > 15 or "/" in x or " " in x:
        raise ValueError(f"{x!r} is not a valid interface name")
    return x


def _url(value: Any) -> str:
    x = as_str(value)
    if x.startswith("unix:/"):
        return x  # the CPM's API on a Unix socket (as in the Mininet topology, where the SPM
        # hosts share the CPM's filesystem but not its network namespace)
    if not re.match(r"https?://[^/\s]+", x):
        raise ValueError(f"{x!r} is not an http://, https:// or unix:/PATH URL")
    return x.rstrip("/")


def _int_range(lo: int, hi: int) -> Callable[[Any], int]:
    def conv(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {value!r}")
        if not lo <= value <= hi:
            raise ValueError(f"{value} is out of range [{lo}, {hi}]")
        return value

    return conv


def _float_range(lo: float, hi: float) -> Callable[[Any], float]:
    def conv(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"expected a number, got {value!r}")
        if not lo <= value <= hi:
            raise ValueError(f"{value} is out of range [{lo}, {hi}]")
        return float(value)

    return conv


def _tags(top: Reader) -> tuple[int, ...]:
    value = top.get("tags", lambda v: v)
    if not isinstance(value, list) or not value:
        raise top.error("tags", "expected a non-empty list of tags or 'first-last' ranges")
    lines: list[int] = getattr(value, "item_lines", [top.line_of("tags")] * len(value))
    tags: list[int] = []
    seen: set[int] = set()
    for i, item in enumerate(value):

        def bad(message: str, i: int = i) -> ConfigError:
            return ConfigError(message, path=top.path, line=lines[i], field=f"tags[{i}]")

        if isinstance(item, bool):
            raise bad(f"expected a tag number or range, got {item!r}")
        if isinstance(item, int):
            lo = hi = item
        elif isinstance(item, str) and (m := re.fullmatch(r"\s*(\w+)\s*-\s*(\w+)\s*", item)):
            try:
                lo, hi = int(m.group(1), 0), int(m.group(2), 0)
            except ValueError:
                raise bad(f"{item!r} is not a range 'first-last'") from None
        else:
            raise bad(f"expected a tag number or a range 'first-last', got {item!r}")
        if not 0 <= lo <= hi <= 0xFFFF:
            raise bad(f"tag range {lo}-{hi} is not within 0-65535")
        for tag in range(lo, hi + 1):
            if tag in seen:
                raise bad(f"tag {tag} is listed twice")
            seen.add(tag)
            tags.append(tag)
    return tuple(tags)


def _queue(m: Reader) -> QueueConfig:
    d = QueueConfig()
    return QueueConfig(
        num=m.get("num", _int_range(0, 65535), d.num),
        length=m.get("length", _int_range(1, 1 << 20), d.length),
        fail_open=m.get("fail_open", as_bool, d.fail_open),
        backend=m.get("backend", one_of(*QUEUE_BACKENDS), d.backend),
        per_source=m.get("per_source", _int_range(1, 1 << 20), d.per_source),
        window=m.get("window", _int_range(1, 1 << 16), d.window),
    )


def _variables(value: Any) -> Mapping[str, str]:
    if not isinstance(value, dict):
        raise ValueError("expected a mapping of variable names to values")
    out: dict[str, str] = {}
    for name, item in value.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"{name!r} is not a valid variable name")
        x = "[" + ",".join(str(i) for i in item) + "]" if isinstance(item, list) else item
        if isinstance(x, dict) or x is None:
            raise ValueError(f"{name}: expected a value such as '10.0.0.0/8' or '[80,8080]'")
        out[name] = str(x)
    return out


def _paths(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (as_str(value),)
    if not isinstance(value, list):
        raise ValueError("expected a path or a list of paths")
    return tuple(as_str(v) for v in value)


def _ips(m: Reader) -> IpsConfig:
    d = IpsConfig()
    return IpsConfig(
        enabled=m.get("enabled", as_bool, d.enabled),
        engine=m.get("engine", one_of(*IPS_ENGINES), d.engine),
        rules=m.get("rules", _paths, d.rules),
        variables=m.get("variables", _variables, d.variables),
        alert_action=m.get("alert_action", one_of(*ALERT_ACTIONS), d.alert_action),
    )


def _av(m: Reader) -> AvConfig:
    d = AvConfig()
    return AvConfig(
        enabled=m.get("enabled", as_bool, d.enabled),
        clamd_socket=m.get("clamd_socket", as_str, d.clamd_socket),
        max_scan_size=m.get("max_scan_size", _int_range(1, 1 << 32), d.max_scan_size),
        timeout=m.get("timeout", _float_range(0.01, 600.0), d.timeout),
        on_clamd_down=m.get("on_clamd_down", one_of(*POLICIES), d.on_clamd_down),
        on_size_limit=m.get("on_size_limit", one_of(*POLICIES), d.on_size_limit),
        max_buffered=m.get("max_buffered", _int_range(1, 1 << 36), d.max_buffered),
    )


def _classes(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValueError("expected a list of flow classes")
    conv = one_of(*BYPASS_CLASSES)
    return tuple(conv(v) for v in value)


def _bypass(m: Reader) -> BypassConfig:
    d = BypassConfig()
    return BypassConfig(
        classes=m.get("classes", _classes, d.classes),
        after_bytes=m.get("after_bytes", _int_range(0, 1 << 40), d.after_bytes),
    )


def _limits(m: Reader) -> LimitsConfig:
    d = LimitsConfig()
    return LimitsConfig(
        max_flows=m.get("max_flows", _int_range(16, 1 << 24), d.max_flows),
        flow_timeout=m.get("flow_timeout", _float_range(1.0, 86400.0), d.flow_timeout),
        stream_flow_bytes=m.get("stream_flow_bytes", _int_range(0, 1 << 30), d.stream_flow_bytes),
        stream_total_bytes=m.get(
            "stream_total_bytes", _int_range(0, 1 << 36), d.stream_total_bytes
        ),
        stream_segments=m.get("stream_segments", _int_range(1, 1 << 20), d.stream_segments),
        http_depth=m.get("http_depth", _int_range(0, 1 << 30), d.http_depth),
        inspect_total_bytes=m.get(
            "inspect_total_bytes", _int_range(0, 1 << 36), d.inspect_total_bytes
        ),
    )
