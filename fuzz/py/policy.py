"""The CPM's policy loader (controller/policy.py `load_policy` from text, as the REST API calls
it): any text loads into a Policy or is refused with a ConfigError naming file, line and field,
the loader's documented error. Files a policy names (rules, keys) are read relative to the
example policy's directory, controller/examples/."""

from __future__ import annotations

from controller.policy import load_policy
from opengate.errors import ConfigError
from opengate.target import repo_root

ERRORS: tuple[type[BaseException], ...] = (ConfigError,)
PATH = repo_root() / "controller" / "examples" / "fuzz.yaml"


def one_input(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    policy = load_policy(PATH, text)
    assert policy.sha256
