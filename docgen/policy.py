"""The policy file's reference page (docs/reference/policy.md), from `controller/policy_schema.py`.

One section per top-level key with a table of its keys, then real errors: broken variants of
`controller/examples/gateway.yaml`, each loaded by `load_policy` when the page is made, with the
message the loader gives. The messages name the file `policy.yaml` (the variants are loaded as
text under that name beside the example, so the files it names are found and no absolute path
shows).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass

from controller.policy import load_policy
from controller.policy_schema import SCHEMA, Key, top_level
from docgen import markdown as md
from opengate.errors import ConfigError
from opengate.target import repo_root

SOURCE = "controller/policy_schema.py"
HEADER = md.header(SOURCE)
EXAMPLE = "controller/examples/gateway.yaml"
SHOWN_NAME = "policy.yaml"


@dataclass(frozen=True, slots=True)
class Broken:
    """A mistake: whole lines `old` of the example replaced by `new`."""

    title: str
    old: str
    new: str


BROKEN: tuple[Broken, ...] = (
    Broken("An unknown key", "  queue_limit: 4096\n", "  queue_limt: 4096\n"),
    Broken(
        "A missing key",
        '  - {name: h2, address: 10.0.1.11, mac: "00:00:00:00:01:11"}\n',
        "  - {name: h2, address: 10.0.1.11}\n",
    ),
    Broken("A value of the wrong type", "  down_after: 2.5\n", "  down_after: soon\n"),
    Broken(
        "A value that is not one of the choices",
        "    role: outside\n",
        "    role: outsde\n",
    ),
    Broken(
        "A bad prefix",
        "  inside: [10.0.1.0/24, 2001:db8:1::/64]\n",
        "  inside: [10.0.1.0/33, 2001:db8:1::/64]\n",
    ),
    Broken(
        "An unknown network name",
        "    - {name: lan-out, src: inside, action: permit}\n",
        "    - {name: lan-out, src: insde, action: permit}\n",
    ),
    Broken(
        "Ports on a rule that is not TCP or UDP",
        "    - {name: ping-gateway-net, src: outside, dst: inside, proto: icmp, action: deny}\n",
        "    - {name: ping-gateway-net, src: outside, dst: inside, proto: icmp, dport: 80, "
        "action: deny}\n",
    ),
    Broken(
        "A rule with literal addresses of both families",
        "    - {name: web-forward, dst: 198.51.100.1, proto: tcp, dport: 8080, action: permit}\n",
        '    - {name: web-forward, dst: [198.51.100.1, "2001:db8:2::1"], proto: tcp, dport: 8080, '
        "action: permit}\n",
    ),
    Broken(
        "A route through a host that is not a neighbour",
        "routes: []\n",
        "routes:\n  - {prefix: 203.0.113.0/24, via: 198.51.100.99}\n",
    ),
    Broken(
        "An unknown pool",
        "  - {name: ips-av, pool: main, services: [ips, av], on_failure: open}\n",
        "  - {name: ips-av, pool: mian, services: [ips, av], on_failure: open}\n",
    ),
    Broken(
        "A bad meter reference",
        "  {session_nat: cpu-nat, session_collision: cpu-nat, acl: cpu-acl, "
        "ttl_expired: cpu-acl,\n",
        "  {session_nat: cpu-nat, session_collision: cpu-nat, acl: cpu-acls, "
        "ttl_expired: cpu-acl,\n",
    ),
    Broken(
        "A class id out of range",
        "  - {id: 3, name: other, chain: ips-av, bypass: true, default: true}\n",
        "  - {id: 0, name: other, chain: ips-av, bypass: true, default: true}\n",
    ),
    Broken(
        "A NAT range that overlaps the data plane's block",
        "  ports: 20000-49151\n",
        "  ports: 20000-50000\n",
    ),
    Broken(
        "A port forward to a host with no route",
        "    - {address: 198.51.100.1, proto: tcp, port: 8080, to: 10.0.1.10, to_port: 80}\n",
        "    - {address: 198.51.100.1, proto: tcp, port: 8080, to: 10.0.9.10, to_port: 80}\n",
    ),
    Broken(
        "An IPsec pool that is also an inspection pool",
        "  new_flows_per_source: {rate: 1000, burst: 2000}\n",
        "  new_flows_per_source: {rate: 1000, burst: 2000}\n"
        "\n"
        "ipsec:\n"
        "  pool: main\n"
        "  address: 198.51.100.2\n"
        "  tunnels:\n"
        "    - {name: site-b, local_subnets: [inside], remote_subnets: [10.0.2.0/24],\n"
        '       peer: 198.51.100.3, auth: {psk: "a long shared secret"}}\n',
    ),
    Broken("A file that cannot be read", "  rules: gateway.rules\n", "  rules: gateway.rulez\n"),
    Broken("A key given twice", "name: gateway\n", "name: gateway\nname: gateway-2\n"),
)


def render() -> str:
    lines = [HEADER, "", "# Policy file", "", *_intro()]
    for top in top_level():
        lines += [f"## `{top}`", "", *md.table(_HEAD, (_row(k) for k in _section(top))), ""]
    lines += _errors()
    return md.page(lines)


_HEAD = ("Key", "Type", "Default", "Description")


def _intro() -> list[str]:
    return [
        "The gateway's policy is one YAML file: its ports and addresses, the hosts it reaches "
        "directly, what it lets through (the ACL), what it inspects and where (IDS rules, "
        "classes, chains, SPM pools), how it translates (NAT), how fast (meters, new-flow "
        f"limits), its session settings and its IPsec tunnels. `{EXAMPLE}` is an example (the "
        "policy of the default Mininet topology); the [policy how-to](../howto/policy.md) "
        "builds one step by step.",
        "",
        "- The file is checked as a whole when it loads (`opengate policy validate FILE` checks "
        "it locally), before anything reaches a switch. Every mistake is an error naming "
        "`file:line: field`, as in [Errors](#errors) below.",
        "- Unknown keys are errors, so that a typo never silently does nothing.",
        "- Files the policy names (ClassBench and Snort rules, pre-shared keys, certificates) "
        "are read relative to the policy file, and checked when it loads; the policy's hash "
        "covers them.",
        "",
        "In the tables, `[]` stands for each item of a list (`acl.rules[].action`) and "
        '`<name>` for a key you name (`networks.<name>`). A type "X, or a list of them" takes '
        "one X or a YAML list of them. A default is written as you would write the "
        "value; `<KEY>` in a default is the value of KEY in the same item (`<cir>`), `<i>` the "
        "item's position in its list counting from 0. A key with neither a default nor "
        '"required" is optional: left out, it is off or empty unless its description says '
        "otherwise.",
        "",
    ]


def _section(top: str) -> list[Key]:
    return [k for k in SCHEMA if k.path == top or k.path.startswith((f"{top}.", f"{top}[]"))]


def _row(key: Key) -> list[str]:
    if key.required:
        default = "required"
    elif key.default is not None:
        default = md.code(key.default)
    else:
        default = ""
    return [md.code(key.path), md.text(key.type), default, md.text(key.doc)]


def _errors() -> list[str]:
    folder = repo_root() / os.path.dirname(EXAMPLE)
    original = (repo_root() / EXAMPLE).read_text()
    load_policy(folder / SHOWN_NAME, original)  # the example itself loads
    lines = [
        "## Errors",
        "",
        f"Each snippet changes `{EXAMPLE}`; under it is what loading the changed file gives. "
        "These are made by the loader when this page is generated.",
        "",
    ]
    for broken in BROKEN:
        if original.count(broken.old) != 1 or not broken.old.endswith("\n"):
            raise ValueError(f"{broken.title}: {broken.old!r} is not one set of lines of {EXAMPLE}")
        start = original.index(broken.old)
        line = original.count("\n", 0, start) + 1
        text = original.replace(broken.old, broken.new, 1)
        try:
            load_policy(folder / SHOWN_NAME, text)
        except ConfigError as error:
            message = str(error).replace(str(folder) + os.sep, "")
        else:
            raise ValueError(f"{broken.title}: the broken policy loads")
        lines += [
            f"### {broken.title}",
            "",
            f"From line {line}:",
            "",
            "```diff",
            *_diff(broken.old, broken.new),
            "```",
            "",
            "```text",
            message,
            "```",
            "",
        ]
    return lines


def _diff(old: str, new: str) -> list[str]:
    before, after = old.splitlines(), new.splitlines()
    out: list[str] = []
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out += [f" {line}" for line in before[i1:i2]]
            continue
        out += [f"-{line}" for line in before[i1:i2]]
        out += [f"+{line}" for line in after[j1:j2]]
    return out
