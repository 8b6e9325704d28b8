"""The Snort 3 rules parser (opengate/snort/rules.py) and the header expressions it leaves to its
users (opengate/snort/header.py: address and port sets, with variables): any text parses or is
refused with a ConfigError naming file and line (the parser's documented error), strictly or
keeping going; each rule's header the controller's IDS compiler (controller/hsm/snort_header.py)
resolves or refuses the same way."""

from __future__ import annotations

import contextlib

from controller.hsm.snort_header import ids_rules_from_raw
from opengate.errors import ConfigError
from opengate.snort.header import SnortVariables, addresses, ports
from opengate.snort.rules import parse_rules_text

ERRORS: tuple[type[BaseException], ...] = (ConfigError,)
VARIABLES = SnortVariables()


def one_input(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    lenient = parse_rules_text(text, include_commented=True, strict=False)
    for rule in lenient.rules:
        assert rule.line >= 1 and rule.path == "<rules>"
    for error in lenient.errors:
        assert isinstance(error, ConfigError)
    with contextlib.suppress(ConfigError):
        ids_rules_from_raw(lenient.enabled, VARIABLES)
    for rule in lenient.rules[:4]:
        for expr in (rule.src, rule.dst):
            if expr is not None:
                with contextlib.suppress(ConfigError):
                    addresses(expr, VARIABLES.values)
        for expr in (rule.src_ports, rule.dst_ports):
            if expr is not None:
                with contextlib.suppress(ConfigError):
                    ports(expr, VARIABLES.values)
    parse_rules_text(text, strict=True)
