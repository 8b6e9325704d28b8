"""The policy file's keys, declared: what each is, its default, and what the loader refuses.

`controller/policy.py` (with `opengate/ipsec.py` for `ipsec`) parses the file; this module says
the same for people. `docs/reference/policy.md` is generated from SCHEMA (`docgen/policy.py`), and
`tests/controller/test_policy_schema.py` holds SCHEMA to the parser: every key the parser reads
is here and every key here is read, the defaults agree, and a key is required exactly when the
parser says "missing" without it.

Paths are dotted; `[]` stands for a list's items and `<name>` for a mapping's free keys. A default
is written as the user would write it; `<KEY>` in a default is the value of KEY in the same item,
`<i>` the item's position in its list counting from 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from controller.acl6 import ICMPV6_ERROR_MODES
from controller.hsm.rules import PROTOCOL_NUMBERS, AclAction
from controller.policy import (
    CPU_REASONS,
    DATA_PLANE_ENTRIES,
    FAIL_POLICIES,
    FORMAT_VERSION,
    MAX_CLASS_ID,
    MAX_POOL_ID,
    MAX_PORT_NUMBER,
    NAT_DP_PORTS,
    ON_FAILURE,
    ROLES,
    SERVICES,
    TO_CPU_ACTIONS,
    NatSpec,
    SessionSettings,
    SpmSettings,
)
from controller.policy_values import IPV6_PROTOCOLS
from opengate import p4constants as pc
from opengate.ipsec import (
    DEFAULT_ESP,
    DEFAULT_IKE,
    DH,
    ENCRYPTION,
    INTEGRITY,
    MIN_PSK_LENGTH,
    PRF,
)
from opengate.nptv6 import MAX_PREFIX as MAX_NPTV6_PREFIX


@dataclass(frozen=True, slots=True)
class Key:
    path: str  # dotted; "[]" for a list's items, "<name>" for a mapping's free keys
    type: str  # as a user reads it
    default: str | None  # as the user would write it; None if required or no default
    required: bool
    doc: str  # what it does, its constraints and what is refused


def show(value: Any) -> str:
    """A value as one writes it in the policy file (YAML flow style)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return str(value)


def one_of(choices: Iterable[str]) -> str:
    return "one of: " + ", ".join(choices)


def names_of(choices: Iterable[str]) -> str:
    return "name or list of: " + ", ".join(choices)


def _key(path: str, type_: str, doc: str, default: Any = None, required: bool = False) -> Key:
    return Key(path, type_, None if default is None else show(default), required, doc)


def _required(path: str, type_: str, doc: str) -> Key:
    return Key(path, type_, None, True, doc)


_SESSIONS = SessionSettings()
_SPM = SpmSettings()
_NAT = NatSpec()
_ACL_ACTIONS = [a.value for a in AclAction]

MAPPING = "mapping"
LIST = "list of mappings"
MAC = "MAC address"
IPV4 = "IPv4 address"
IPV46 = "IPv4 or IPv6 address"
PREFIXES = "network name or prefix, or a list of them; any"
SUBNETS = "network name or prefix, or a list of them"
SECONDS = "seconds (number)"
DURATION = "duration (seconds, or 30s, 15m, 4h, 1d)"
PORTS = "port, LOW-HIGH or LOW:HIGH, or a list of them; any"
FILE = "file name"

# One line per CPU reason and per idle timeout: a reason added to CPU_REASONS needs its line here.
_CPU_REASON_DOCS = {
    "session_nat": "Opening packets of sessions whose NAT the CPM sets up.",
    "acl": "Packets an ACL rule sends to the CPM (`to_cpu`).",
    "ttl_expired": "Packets from inside whose TTL runs out here (the gateway answers them).",
    "no_route": "Packets from inside that no route takes, and pings of the gateway's addresses.",
    "session_collision": "Opening packets whose two data-plane slots are held (they wait at the "
    "CPM).",
    "session_v6": "Opening packets of IPv6 flows the ACL permits (the CPM installs their "
    "sessions).",
    "nat64_icmp_error": "ICMP errors about NAT64 flows (the CPM translates them to ICMPv6).",
}
_IDLE_DOCS = {
    "tcp": "TCP sessions.",
    "udp": "UDP sessions.",
    "icmp": "ICMP and ICMPv6 echo sessions.",
    "other": "Sessions of any other protocol.",
}


def _top() -> list[Key]:
    return [
        _key(
            "version",
            "integer",
            f"The format's version: only {FORMAT_VERSION} is known, any other is refused.",
            FORMAT_VERSION,
        ),
        _key(
            "name",
            "string",
            "The policy's name, shown with its version and hash by the API and the CLI.",
            "opengate",
        ),
        _key(
            "networks",
            MAPPING,
            "Named prefixes, IPv4 and IPv6 mixed as you like. A name stands for its prefixes "
            "wherever the policy takes prefixes: in ACL `src` and `dst` for each family its own "
            "(a rule naming `inside` applies to IPv4 packets with its IPv4 prefixes and to IPv6 "
            "packets with its IPv6 ones), in masquerade `sources` and IPsec subnets (IPv4 only) "
            "its IPv4 ones. Each network is a Snort variable of the IDS rules (`$inside`).",
        ),
        _key(
            "networks.<name>",
            "IPv4 or IPv6 prefix, or a list of prefixes and network names",
            "Host bits are allowed (10.0.1.1/24 is 10.0.1.0/24, 2001:db8:1::1/64 is "
            "2001:db8:1::/64); a name refers only to networks listed above it. An empty list is "
            "refused, and `any` is reserved.",
        ),
    ]


def _ports() -> list[Key]:
    return [
        _required(
            "ports",
            LIST,
            "The switch ports the gateway uses; at least one has role `inside`.",
        ),
        _required(
            "ports[].port",
            "integer",
            f"The port number, 1..{MAX_PORT_NUMBER} but not {pc.CPU_PORT} (the CPU port); each "
            "number once.",
        ),
        _required(
            "ports[].role",
            one_of(ROLES),
            "`inside`: the protected LAN; `outside`: the rest of the world; `spm`: a link to an "
            "inspection host (SPM).",
        ),
        _key("ports[].name", "string", "A label for logs, the API and the console.", "port<port>"),
        _key(
            "ports[].mac",
            MAC,
            "The gateway's MAC on this port, which answers ARP and neighbour solicitations for "
            "the gateway's addresses; inside and outside ports need it. The port's IPv6 "
            "link-local address is made from it (fe80::/64 and the modified EUI-64, RFC 4291).",
        ),
        _key(
            "ports[].addresses",
            "IPv4 or IPv6 address/prefix, or a list of them",
            "The gateway's addresses on this port (`10.0.1.1/24`, `2001:db8:1::1/64`: the "
            "address and its subnet), both families mixed. The subnets tell which port reaches a "
            "neighbour; the first IPv4 address is the default masquerade address and the source "
            "of the gateway's ICMP errors, the first IPv6 one that of its ICMPv6 errors. IPv6 "
            "addresses are global or unique local: link-local (the port's own is made from its "
            "MAC), multicast, loopback, unspecified and ::/96 ones are refused. Refused on `spm` "
            "ports.",
        ),
        _key(
            "ports[].router_advertisements",
            "mapping",
            "Send router advertisements (RFC 4861) out of this inside port: unsolicited, to all "
            "nodes, from the port's link-local address, naming the gateway a default router and "
            "each IPv6 network of the port on-link. Router solicitations are not answered: hosts "
            "wait for the next advertisement. `{}` takes the defaults. Absent: none sent.",
        ),
        _key(
            "ports[].router_advertisements.interval",
            "seconds (4..1800)",
            "MaxRtrAdvInterval: advertisements go at random intervals between a third of it and "
            "it (the first three at most 16 s apart).",
            600.0,
        ),
        _key(
            "ports[].router_advertisements.lifetime",
            "seconds (0, or interval..9000)",
            "The router lifetime hosts keep the gateway as a default router for; 0: not a "
            "default router. At least the interval.",
            1800,
        ),
        _key(
            "ports[].router_advertisements.autonomous",
            "boolean",
            "Let hosts form their own addresses in the port's prefixes (SLAAC; /64s only). The "
            "gateway reaches only the neighbours the policy lists, so a host's SLAAC address "
            "needs a `neighbours` entry before traffic to it is routed.",
            False,
        ),
        _key(
            "ports[].router_advertisements.mtu",
            "integer (1280..65535)",
            "An MTU option: the link MTU hosts use. Absent: none.",
        ),
        _key(
            "neighbours",
            LIST,
            "Hosts the gateway reaches directly. The gateway answers ARP and neighbour "
            "solicitations for its own addresses but resolves no one else's, so it needs their "
            "MACs; each gets a /32 or /128 route. A host with an IPv4 and an IPv6 address is "
            "listed twice, once with each.",
        ),
        _required(
            "neighbours[].address",
            IPV46,
            "The host's address; each address once. An IPv6 one is global or unique local.",
        ),
        _required("neighbours[].mac", MAC, "The host's MAC."),
        _key("neighbours[].name", "string", "A label.", "<address>"),
        _key(
            "neighbours[].port",
            "integer",
            "The port that reaches the host, one of `ports`. Without it, the first port whose "
            "subnet holds the address; a host on no port's subnet needs it.",
        ),
        _key("routes", LIST, "Static routes through a neighbour."),
        _required(
            "routes[].prefix",
            "IPv4 or IPv6 prefix",
            "The destination (`::/0`: IPv6's default route). Host bits must be zero; a prefix "
            "has one route (a neighbour's /32 or /128 counts).",
        ),
        _required(
            "routes[].via",
            IPV46,
            "The next hop: the address of one of `neighbours`, of the prefix's family.",
        ),
    ]


def _acl() -> list[Key]:
    return [
        _key(
            "acl",
            MAPPING,
            "What the gateway lets through, IPv4 and IPv6: the first rule that matches decides, "
            "and `default` decides the rest. Without the section everything is denied.",
        ),
        _key(
            "acl.default",
            one_of(_ACL_ACTIONS),
            "What happens to packets that no rule matches. IPv6: a flow the ACL permits gets a "
            "session from its first packet, and packets of no session are dropped unless a rule "
            "permits them, so `deny` keeps out unsolicited inbound traffic (RFC 6092).",
            AclAction.DENY.value,
        ),
        _key(
            "acl.icmpv6_errors",
            one_of(ICMPV6_ERROR_MODES),
            "`permit`: after the rules and before `default`, the ICMPv6 errors RFC 4890 says a "
            "firewall must not drop pass (destination unreachable, packet too big, time "
            "exceeded, parameter problem: types 1 to 4); `policy`: only the rules decide. Echo "
            "requests and other ICMPv6 follow the rules either way.",
            ICMPV6_ERROR_MODES[0],
        ),
        _key(
            "acl.rules",
            LIST,
            "The rules, in order (the rules of `classbench` follow them).",
        ),
        _key("acl.rules[].name", "string", "A label.", "rule<i>"),
        _required(
            "acl.rules[].action",
            one_of(_ACL_ACTIONS),
            "`permit` lets the packet through, `deny` drops it, `to_cpu` sends it to the CPM, "
            "which does what `sessions.acl_to_cpu` says.",
        ),
        _key(
            "acl.rules[].src",
            PREFIXES,
            "Source addresses: network names, prefixes or addresses. `any` anywhere in the list "
            "makes the field match anything; an empty list is refused. A rule applies to both "
            "families unless a literal address or prefix (in `src` or `dst`) makes it its "
            "family's alone; literal IPv4 and IPv6 addresses in one rule are refused. A network "
            "name stands for the family's own prefixes (one with none of a family matches "
            "nothing of it).",
            "any",
        ),
        _key(
            "acl.rules[].dst",
            PREFIXES,
            "Destination addresses, written as `src` is.",
            "any",
        ),
        _key(
            "acl.rules[].proto",
            f"protocol ({', '.join([*PROTOCOL_NUMBERS, *IPV6_PROTOCOLS])} or 0..255), or a list "
            "of them; any",
            "The IP protocol (IPv6: the upper-layer protocol after the extension headers); `ip` "
            "is the same as `any`. `icmp` is IPv4's and `icmpv6` (or `ipv6-icmp`) IPv6's: a rule "
            "with one of them alone is that family's, and one with a literal address of the "
            "other family is refused. An empty list is refused.",
            "any",
        ),
        _key(
            "acl.rules[].sport",
            PORTS,
            "Source ports within 0..65535. With `proto` given, ports need it to be tcp and/or "
            "udp; an empty list is refused.",
            "any",
        ),
        _key("acl.rules[].dport", PORTS, "Destination ports, written as `sport` is.", "any"),
        _key(
            "acl.rules[].icmp_type",
            "integer (0..255), or a list of them; any",
            "ICMPv6 types (128: echo request, 129: echo reply, 1: destination unreachable...); "
            "needs `proto: icmpv6` alone.",
            "any",
        ),
        _key(
            "acl.classbench",
            MAPPING,
            "ACL rules read from a ClassBench filter file, after `rules`.",
        ),
        _required(
            "acl.classbench.file",
            FILE,
            "The ClassBench file, relative to the policy file; a malformed line is an error "
            "naming the file's line.",
        ),
        _key(
            "acl.classbench.action",
            one_of(_ACL_ACTIONS),
            "The action of every rule of the file (ClassBench has none).",
            AclAction.PERMIT.value,
        ),
        _key(
            "acl.classbench.limit",
            "positive integer",
            "Read only the file's first rules, this many; without it, all of them.",
        ),
    ]


def _ids() -> list[Key]:
    return [
        _key(
            "ids",
            MAPPING,
            "The IDS rules whose headers give flows their class (and so their inspection). The "
            "CPM uses only the rules' headers; the SPMs run the rules in full.",
        ),
        _required(
            "ids.rules",
            FILE,
            "A Snort 3 rules file, relative to the policy file. A malformed rule is an error "
            "naming the rules file's line; rules that map to no class are left out.",
        ),
        _key(
            "ids.variables",
            MAPPING,
            "Snort variables for the rules' headers: every network is one already, and these "
            "add to them or override them.",
        ),
        _key(
            "ids.variables.<name>",
            "string, or a list of strings",
            "A Snort value (`10.0.0.0/8`, `!$HOME_NET`, `[80,8080]`); an item that is a network "
            "name stands for its prefixes.",
        ),
    ]


def _classes() -> list[Key]:
    return [
        _key(
            "classes",
            LIST,
            "Traffic classes: which IDS rules give which class (by sid first, then service, "
            "then classtype, else the default class), and what a class's flows get: an "
            "inspection chain, a meter, bypass.",
        ),
        _required(
            "classes[].id",
            "integer",
            f"1..{MAX_CLASS_ID} (0 is no class); each id once.",
        ),
        _required("classes[].name", "string", "Each name once."),
        _key(
            "classes[].chain",
            "chain name",
            "The chain (one of `chains`) that inspects the class's flows. Without it the class "
            "is counted and metered but not inspected.",
        ),
        _key("classes[].meter", "meter name", "The meter (one of `meters`) of the class."),
        _key(
            "classes[].bypass",
            "boolean",
            "Whether SPMs may offload clean flows of the class to the fast path.",
            False,
        ),
        _key(
            "classes[].sids",
            "integer, or a list of integers",
            "IDS rules (by sid) of the class. A sid belongs to one class only.",
        ),
        _key(
            "classes[].classtypes",
            "string, or a list of strings",
            "IDS rules of the class by their `classtype`; a classtype belongs to one class only.",
        ),
        _key(
            "classes[].services",
            "string, or a list of strings",
            "IDS rules of the class by their service (the rule's `service:` option, or a service "
            "rule's protocol such as `http`); a service belongs to one class only.",
        ),
        _key(
            "classes[].default",
            "boolean",
            "IDS rules that no class claims map to this class; one class at most is the default.",
            False,
        ),
        _key(
            "chains",
            LIST,
            "Service chains: the SPM pool that inspects and the services it runs.",
        ),
        _required("chains[].name", "string", "Each name once."),
        _required(
            "chains[].pool",
            "pool name",
            "The pool (one of `spm_pools`) whose SPMs inspect; not the IPsec pool.",
        ),
        _key(
            "chains[].services",
            "list of: " + ", ".join(SERVICES),
            "What the SPMs run on the chain's flows: `ips` (the Snort rules), `av` (ClamAV).",
            ["ips"],
        ),
        _key(
            "chains[].on_failure",
            one_of(ON_FAILURE),
            "A new flow when no SPM of the pool is up: `open` lets it through uninspected, "
            "`closed` drops it.",
            ON_FAILURE[0],
        ),
    ]


def _spms() -> list[Key]:
    return [
        _key(
            "spm_pools",
            LIST,
            "Pools of SPMs (inspection hosts). New flows are spread over a pool's SPMs by "
            "weight, scaled down with each SPM's reported load.",
        ),
        _required("spm_pools[].name", "string", "Each name once."),
        _key(
            "spm_pools[].id",
            "integer",
            f"1..{MAX_POOL_ID}; each id once.",
            "<i+1>",
        ),
        _key(
            "spm_pools[].fail_policy",
            one_of(FAIL_POLICIES),
            "The flows of an SPM that goes down: `resteer` moves them to another SPM of the "
            "pool (with none up, the chain's `on_failure` decides), `fail_closed` blocks them.",
            FAIL_POLICIES[0],
        ),
        _required(
            "spm_pools[].spms",
            LIST,
            "The pool's SPMs, at least one. An SPM defined earlier (in this pool or another) "
            "may be listed again by its name alone, and is then in both.",
        ),
        _required(
            "spm_pools[].spms[].name",
            "string",
            "Each SPM is defined once; names whose action-profile member ids collide are "
            "refused (rename one).",
        ),
        _required(
            "spm_pools[].spms[].port",
            "integer",
            "The port that reaches the SPM: one of `ports` with role `spm`.",
        ),
        _required("spm_pools[].spms[].mac", MAC, "The SPM's MAC on that link."),
        _key(
            "spm_pools[].spms[].weight",
            "positive integer",
            "The SPM's share of new flows when it is unloaded, 1..64.",
            8,
        ),
        _key("spm", MAPPING, "How the CPM follows the SPMs' liveness and load."),
        _key(
            "spm.down_after",
            SECONDS,
            "Seconds without a load report after which an SPM is down; 0 turns liveness checks "
            "off. Negative values are refused.",
            _SPM.down_after,
        ),
        _key(
            "spm.queue_limit",
            "positive integer",
            "The queue depth that counts as fully loaded.",
            _SPM.queue_limit,
        ),
        _key(
            "spm.min_weight_change",
            "positive integer",
            "A pool's weights are rewritten only when one moves by at least this much.",
            _SPM.min_weight_change,
        ),
        _key(
            "spm.startup_grace",
            SECONDS,
            "Seconds an SPM that has never reported (clamd loading its signatures) has for its "
            "first report before it is down; the CPM gives never less than `down_after`.",
            _SPM.startup_grace,
        ),
    ]


def _meters() -> list[Key]:
    reasons = [
        _key(f"cpu_meters.{reason}", "meter name", _CPU_REASON_DOCS[reason])
        for reason in CPU_REASONS
    ]
    return [
        _key(
            "meters",
            LIST,
            "Two-rate three-colour meters, in bytes; `classes` and `cpu_meters` name them.",
        ),
        _required("meters[].name", "string", "Each name once."),
        _required("meters[].cir", "positive integer", "The committed rate, bytes per second."),
        _required("meters[].cburst", "positive integer", "The committed burst, bytes."),
        _key(
            "meters[].pir",
            "positive integer",
            "The peak rate, bytes per second; not below `cir`.",
            "<cir>",
        ),
        _key("meters[].pburst", "positive integer", "The peak burst, bytes.", "<cburst>"),
        _key(
            "cpu_meters",
            MAPPING,
            "Meters (each one of `meters`) on the path to the CPM, by the reason a packet "
            "takes it, and `per_source`. Any other key is refused, naming the known ones.",
        ),
        *reasons,
        _key(
            "cpu_meters.per_source",
            "meter name",
            "Every source address gets its own cell of this meter, so that one host's flood of "
            "packets for the CPM leaves the others their share.",
        ),
    ]


def _nat() -> list[Key]:
    low, high = _NAT.ports
    return [
        _key(
            "nat",
            MAPPING,
            "Address translation: masquerading and port forwards (IPv4), prefix translation "
            "(NPTv6, IPv6).",
        ),
        _key(
            "nat.ports",
            "port range (LOW-HIGH or [LOW, HIGH])",
            "The ports the CPM allocates (flows the NPM could not masquerade itself, port "
            "forwards), within 1..65535; they must not overlap the data plane's block. The "
            "default runs from 1024 to the port before the block: 1024-65535 with "
            "`data_plane_ports: off`, and from the block's end to 65535 if it starts at 1024 "
            "or lower.",
            f"{low}-{high}",
        ),
        _key(
            "nat.data_plane_ports",
            "integer, or off",
            f"The first port of the NPM's block of {NAT_DP_PORTS:,} ports, from which it "
            f"masquerades new flows itself: 1..{65536 - NAT_DP_PORTS}. `off` (or `false`): every "
            f"masqueraded flow goes through the CPM.",
            _NAT.data_plane_base,
        ),
        _key(
            "nat.masquerade",
            LIST,
            "Source NAT: flows from `sources` that leave by `port` take `address`; the longest "
            "matching source prefix wins.",
        ),
        _required(
            "nat.masquerade[].port",
            "integer",
            "The egress port: one of `ports`, inside or outside.",
        ),
        _required(
            "nat.masquerade[].sources",
            PREFIXES,
            "The sources it translates (`any`: all).",
        ),
        _key(
            "nat.masquerade[].address",
            IPV4,
            "The address they take; without it, the port's first address (a port with none "
            "needs it). The gateway answers ARP for it.",
        ),
        _key(
            "nat.port_forwards",
            LIST,
            "Destination NAT: connections to `address`:`port` go to `to`:`to_port`.",
        ),
        _required("nat.port_forwards[].address", IPV4, "The public address."),
        _required("nat.port_forwards[].proto", one_of(("tcp", "udp")), "The protocol."),
        _required(
            "nat.port_forwards[].port",
            "integer (1..65535)",
            "The public port. An address, protocol and port are forwarded once; a port in the "
            "data plane's block is refused on a masquerade address.",
        ),
        _required(
            "nat.port_forwards[].to",
            IPV4,
            "The host it goes to; a route (`neighbours` or `routes`) must reach it.",
        ),
        _key("nat.port_forwards[].to_port", "integer (1..65535)", "The host's port.", "<port>"),
        _key(
            "nat.nptv6",
            LIST,
            "IPv6 prefix translation (NPTv6, RFC 6296: stateless, checksum-neutral, one to one): "
            "sources in `inside` that leave by `port` take `outside`'s prefix, destinations in "
            "`outside` that arrive on it take `inside`'s again. Sessions, the ACL and routes see "
            "the inside addresses; the outside router must route the outside prefix to the "
            "gateway.",
        ),
        _required(
            "nat.nptv6[].port",
            "integer",
            "The port it translates on: one of `ports`, an outside one. The mappings of a port "
            "must not overlap.",
        ),
        _required(
            "nat.nptv6[].inside",
            f"IPv6 prefix (/{MAX_NPTV6_PREFIX} or shorter)",
            "The inside hosts' prefix (host bits zero), not the same as `outside`.",
        ),
        _required(
            "nat.nptv6[].outside",
            "IPv6 prefix (as long as `inside`)",
            "The prefix they have outside; it must not hold one of the gateway's own addresses.",
        ),
        _key(
            "nat.nat64",
            LIST,
            "Stateful NAT64 (RFC 6146, headers translated per RFC 7915): IPv6 flows from inside "
            "to an address in `prefix` leave by `port` as IPv4 flows from `address` to the IPv4 "
            "address in the prefix's last 32 bits, with a port (ICMP identifier) from "
            "`nat.ports`; their replies are translated back. TCP, UDP and ICMP echo are "
            "translated, without IPv6 extension headers, IPv4 options or fragments. The IPv6 ACL "
            "decides which flows may open. With the well-known prefix, IPv4 destinations that "
            "are not global (RFC 1918, loopback, link-local, shared, multicast) are refused "
            "(RFC 6052 section 3.1).",
        ),
        _required(
            "nat.nat64[].port",
            "integer",
            "The outside port the IPv4 side leaves by; the IPv4 destination's route must leave "
            "by it too.",
        ),
        _key(
            "nat.nat64[].prefix",
            "IPv6 prefix (/96)",
            "The prefix IPv6 hosts reach IPv4 ones through (DNS64 synthesizes addresses in it); "
            "it must overlap no other NAT64 prefix, no port's IPv6 network and no NPTv6 prefix.",
            "64:ff9b::/96",
        ),
        _key(
            "nat.nat64[].address",
            IPV4,
            "The IPv4 address the translated flows leave from; without it, the port's first "
            "address. The gateway answers ARP for it.",
        ),
    ]


def _sessions() -> list[Key]:
    timeouts = [
        _key(
            f"sessions.idle_timeout.{proto}",
            "seconds (positive number)",
            _IDLE_DOCS[proto],
            _SESSIONS.idle_timeout[proto],
        )
        for proto in _SESSIONS.idle_timeout
    ]
    return [
        _key("sessions", MAPPING, "How the gateway keeps sessions."),
        _key(
            "sessions.idle_timeout",
            MAPPING,
            "Seconds a session may be idle before it is removed, by protocol; each key optional.",
        ),
        *timeouts,
        _key(
            "sessions.closing_linger",
            SECONDS,
            "Seconds a session stays after FIN in both directions (or RST) before it is "
            "removed. Negative values are refused.",
            _SESSIONS.closing_linger,
        ),
        _key(
            "sessions.acl_to_cpu",
            one_of(TO_CPU_ACTIONS),
            "What the CPM does with the packets an ACL rule sends it (`to_cpu`).",
            _SESSIONS.acl_to_cpu,
        ),
        _key(
            "sessions.new_flows_per_source",
            MAPPING,
            "A limit on each source's new flows (sources share a cell by the low 12 bits of "
            "their address), enforced by the NPM before a flow takes a slot, a port or the "
            "CPM's time. Without it, no limit.",
        ),
        _required(
            "sessions.new_flows_per_source.rate",
            "positive integer",
            "New flows per second.",
        ),
        _key(
            "sessions.new_flows_per_source.burst",
            "positive integer",
            "New flows a source may open at once.",
            "<rate>",
        ),
        _key(
            "sessions.data_plane_entries",
            one_of(DATA_PLANE_ENTRIES),
            "When the CPM installs the exact entries of a session the data plane made (a routed "
            "flow in a slot): `always`, when its digest comes; `on_demand`, once the data plane "
            "reports the flow again or the CPM must act on it (block, bypass, re-steer).",
            _SESSIONS.data_plane_entries,
        ),
        _key(
            "sessions.report_interval",
            "seconds (positive number)",
            "Seconds after which the data plane reports again a routed flow that its slot "
            "carries without exact entries.",
            _SESSIONS.report_interval,
        ),
    ]


def _proposal(kind: str, default: str, keys: Sequence[Key]) -> list[Key]:
    return [
        _key(
            f"ipsec.tunnels[].proposals.{kind}",
            MAPPING,
            f"The {kind.upper()} proposal; without it, {default}.",
        ),
        _required(
            f"ipsec.tunnels[].proposals.{kind}.encryption",
            names_of(ENCRYPTION),
            "Ciphers. AEAD ones (GCM, ChaCha20-Poly1305) and CBC ones cannot be mixed.",
        ),
        _key(
            f"ipsec.tunnels[].proposals.{kind}.integrity",
            names_of(INTEGRITY),
            "Integrity algorithms: CBC ciphers need them, AEAD ciphers refuse them.",
        ),
        *keys,
    ]


def _ipsec() -> list[Key]:
    tunnel = "ipsec.tunnels[]"
    return [
        _key(
            "ipsec",
            MAPPING,
            "Site-to-site IPsec tunnels, held by the SPMs of one pool (each runs charon). "
            "Without the section, no IPsec.",
        ),
        _required(
            "ipsec.pool",
            "pool name",
            "The pool (one of `spm_pools`) whose SPMs hold the tunnels. It may not be a chain's "
            "pool: IPsec SPMs route, they do not return the packets they are sent.",
        ),
        _required(
            "ipsec.address",
            IPV4,
            "The gateway's IKE and ESP address, on an outside port's subnet.",
        ),
        _required(
            "ipsec.tunnels",
            LIST,
            "The tunnels, at least one (leave the section out for none).",
        ),
        _required(
            f"{tunnel}.name",
            "string",
            "A letter, then letters, digits, `-` or `_` (32 characters at most); each name once.",
        ),
        _required(
            f"{tunnel}.local_subnets",
            SUBNETS,
            "The local traffic selectors; `any` and 0.0.0.0/0 are refused.",
        ),
        _required(
            f"{tunnel}.remote_subnets",
            SUBNETS,
            "The remote site's subnets; `any` and 0.0.0.0/0 are refused. They must not overlap "
            "the local subnets, an inside port's subnet or another tunnel's remote subnets.",
        ),
        _required(
            f"{tunnel}.peer",
            IPV4,
            "The remote gateway's IKE address: outside the remote subnets, not `ipsec.address`, "
            "and one tunnel per peer.",
        ),
        _key(f"{tunnel}.ike_version", "integer", "Only 2 (IKEv2); others are refused.", 2),
        _required(
            f"{tunnel}.auth",
            MAPPING,
            "Exactly one of `psk`, `psk_file` or `certificate`; with a pre-shared key the "
            "certificate keys are refused.",
        ),
        _key(
            f"{tunnel}.auth.psk",
            "string",
            f"The pre-shared key, {MIN_PSK_LENGTH} characters at least.",
        ),
        _key(
            f"{tunnel}.auth.psk_file",
            FILE,
            f"A file (relative to the policy file) holding the pre-shared key, {MIN_PSK_LENGTH} "
            "characters at least; whitespace around it is left out.",
        ),
        _key(
            f"{tunnel}.auth.certificate",
            FILE,
            "The gateway's certificate (PEM), relative to the policy file; it needs "
            "`private_key` and `ca`.",
        ),
        _required(
            f"{tunnel}.auth.private_key",
            FILE,
            "With `certificate`: the certificate's private key (PEM).",
        ),
        _required(
            f"{tunnel}.auth.ca",
            FILE,
            "With `certificate`: the CA certificate (PEM) that the peer's certificate must "
            "chain to.",
        ),
        _key(
            f"{tunnel}.auth.local_id",
            "string",
            "With `certificate`: the identity the gateway claims (charon's default without it).",
        ),
        _key(
            f"{tunnel}.auth.remote_id",
            "string",
            "With `certificate`: the identity the peer must prove (`CN=site-b`).",
        ),
        _key(
            f"{tunnel}.proposals",
            MAPPING,
            "The tunnel's algorithms (the project's names, mapped to strongSwan's).",
        ),
        *_proposal(
            "ike",
            DEFAULT_IKE.describe(),
            [
                _key(
                    f"{tunnel}.proposals.ike.prf",
                    names_of(PRF),
                    "Pseudo-random functions (without `ike` at all, the default proposal has "
                    "sha384).",
                    ["sha256"],
                ),
                _required(f"{tunnel}.proposals.ike.dh", names_of(DH), "Diffie-Hellman groups."),
            ],
        ),
        *_proposal(
            "esp",
            DEFAULT_ESP.describe(),
            [
                _key(
                    f"{tunnel}.proposals.esp.dh",
                    names_of(DH),
                    "Diffie-Hellman groups for perfect forward secrecy on rekeys; without it, "
                    "none. ESP takes no `prf`.",
                ),
            ],
        ),
        _key(
            f"{tunnel}.lifetimes",
            MAPPING,
            "When the tunnel's SAs are rekeyed; each at least 10 s.",
        ),
        _key(f"{tunnel}.lifetimes.ike", DURATION, "The IKE SA's rekey time.", "4h"),
        _key(f"{tunnel}.lifetimes.child", DURATION, "The CHILD (ESP) SA's rekey time.", "1h"),
        _key(f"{tunnel}.dpd", DURATION, "The dead peer detection interval; 0 turns it off.", "10s"),
        _key(
            f"{tunnel}.start",
            "boolean",
            "Bring the tunnel up at once; `false`: when traffic or the peer starts it.",
            True,
        ),
    ]


SCHEMA: tuple[Key, ...] = (
    *_top(),
    *_ports(),
    *_acl(),
    *_ids(),
    *_classes(),
    *_spms(),
    *_meters(),
    *_nat(),
    *_sessions(),
    *_ipsec(),
)


def top_level() -> tuple[str, ...]:
    """The top-level keys, in SCHEMA's order."""
    return tuple(k.path for k in SCHEMA if "." not in k.path and "[" not in k.path)


def by_path() -> dict[str, Key]:
    return {k.path: k for k in SCHEMA}
