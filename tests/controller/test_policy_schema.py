"""The policy schema (`controller/policy_schema.py`) says what the parser does: every key the
parser reads is in SCHEMA and every SCHEMA key is read, the defaults the parser passes agree with
SCHEMA's, a key left out takes the schema's default, and a key is required exactly when the parser
says "missing" without it. The keys are recorded by wrapping `Reader`'s accessors while loading
every policy there is, with `data/policy-every-key.yaml` using every key of the format."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from controller.policy import Policy, load_policy
from controller.policy_schema import SCHEMA, Key, by_path, show, top_level
from opengate.errors import ConfigError
from opengate.target import repo_root
from opengate.yamlconf import Reader

T = TypeVar("T")

ROOT = repo_root()
DATA = Path(__file__).resolve().parent / "data"
EVERY_KEY = DATA / "policy-every-key.yaml"

# Mappings whose keys the user names (networks, Snort variables): recorded as `<name>`.
FREE_KEYED = frozenset({"networks", "ids.variables"})
# Defaults that hold while these sibling keys take their own defaults: nat.ports lies below
# the data plane's block, wherever data_plane_ports puts it.
DEFAULT_ASSUMES = {"nat.ports": ("data_plane_ports",)}
_PLACEHOLDER = re.compile(r"<(i|i\+1|[a-z_]+)>")


@dataclasses.dataclass(frozen=True, slots=True)
class Read:
    """One access of the parser to a key."""

    path: str  # normalised: "acl.rules[].action", "networks.<name>"
    how: str  # get, sub, items, has
    convert: Callable[[Any], Any] | None  # get's converter
    default: Any  # get's default
    item: Mapping[str, Any]  # the mapping the key is read from
    index: int | None  # that mapping's position in its list


def _normalise(reader: Reader, key: str) -> tuple[str, int | None]:
    parent = re.sub(r"\[\d+\]", "[]", reader.where)
    name = "<name>" if parent in FREE_KEYED else key
    found = re.search(r"\[(\d+)\]$", reader.where)
    return (f"{parent}.{name}" if parent else name), int(found.group(1)) if found else None


def _read(reader: Reader, key: str, how: str, convert: Any = None, default: Any = None) -> Read:
    path, index = _normalise(reader, key)
    return Read(path, how, convert, default, reader.data, index)


def policy_files() -> list[Path]:
    """The examples, the policies the topologies name, and the tests' data policies."""
    from topo.model import load_topology

    files = sorted((ROOT / "controller" / "examples").glob("*.yaml"))
    for topology in sorted((ROOT / "topo").glob("*.yaml")):
        spec = load_topology(topology, ROOT)
        files += [spec.policy, *(n.policy for n in spec.npms if n.policy is not None)]
    files += sorted(DATA.glob("*.yaml"))
    unique: dict[Path, Path] = {}
    for path in files:
        unique.setdefault(path.resolve(), path)
    return list(unique.values())


@pytest.fixture(scope="module")
def reads() -> Iterator[list[Read]]:
    """Every key access while each policy loads (each must load)."""
    out: list[Read] = []
    get, sub, items, has = Reader.get, Reader.sub, Reader.items, Reader.has

    def record_get(
        self: Reader,
        key: str,
        convert: Callable[[Any], T],
        default: T | None = None,
        required: bool = True,
    ) -> T:
        out.append(_read(self, key, "get", convert, default))
        return get(self, key, convert, default, required)

    def record_sub(self: Reader, key: str) -> Reader:
        out.append(_read(self, key, "sub"))
        return sub(self, key)

    def record_items(self: Reader, key: str, required: bool = True) -> list[Reader]:
        out.append(_read(self, key, "items"))
        return items(self, key, required)

    def record_has(self: Reader, key: str) -> bool:
        out.append(_read(self, key, "has"))
        return has(self, key)

    files = policy_files()
    assert EVERY_KEY.resolve() in {f.resolve() for f in files}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Reader, "get", record_get)
        patch.setattr(Reader, "sub", record_sub)
        patch.setattr(Reader, "items", record_items)
        patch.setattr(Reader, "has", record_has)
        for path in files:
            load_policy(path)
    yield out


# -- the maximal policy, edited ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Place:
    """Where a key is in a policy's data: its mapping, and the field the parser names."""

    parent: dict[str, Any]
    key: str
    field: str
    index: int | None


def places(data: Any, path: str) -> list[Place]:
    found: list[Place] = []

    def walk(node: Any, parts: list[str], prefix: str, index: int | None) -> None:
        if not isinstance(node, dict):
            return
        head, rest = parts[0], parts[1:]
        keys = list(node) if head == "<name>" else [head.removesuffix("[]")]
        for key in keys:
            if key not in node:
                continue
            field = f"{prefix}.{key}" if prefix else key
            if not rest:
                found.append(Place(node, key, field, index))
            elif head.endswith("[]"):
                for i, item in enumerate(node[key] or []):
                    walk(item, rest, f"{field}[{i}]", i)
            else:
                walk(node[key], rest, field, None)

    walk(data, path.split("."), "", None)
    return found


def every_key_data() -> dict[str, Any]:
    data = yaml.safe_load(EVERY_KEY.read_text())
    assert isinstance(data, dict)
    return data


def load_data(data: Mapping[str, Any]) -> Policy:
    """Load edited data as the maximal policy's text (its files still beside it). Flow style on
    one line: every line number is 1, so that two edits compare equal when they mean the same."""
    text = yaml.safe_dump(data, default_flow_style=True, width=1 << 30, sort_keys=False)
    assert text.count("\n") == 1
    policy = load_policy(EVERY_KEY, text)
    return dataclasses.replace(policy, text="", sha256="")


def first_place(data: Any, key: Key) -> Place:
    found = places(data, key.path)
    assert found, f"{key.path} is not in {EVERY_KEY.name}"
    return found[0]


def expected_default(key: Key, item: Mapping[str, Any], index: int | None) -> str:
    """The schema's default with `<KEY>`, `<i>` and `<i+1>` filled in for this item."""
    assert key.default is not None

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in ("i", "i+1"):
            assert index is not None, key.path
            return str(index + (name == "i+1"))
        return show(item[name])

    return _PLACEHOLDER.sub(value, key.default)


# -- the tests --------------------------------------------------------------------------------


def test_schema_paths_are_unique_and_free_keys_are_the_named_mappings() -> None:
    paths = [k.path for k in SCHEMA]
    assert len(paths) == len(set(paths))
    free = {p.rsplit(".", 1)[0] for p in paths if p.endswith(".<name>")}
    assert free == FREE_KEYED
    for key in SCHEMA:
        assert not (key.required and key.default is not None), key.path
        assert key.doc and key.type, key.path
        parent = re.sub(r"(\[\])?\.[^.]+$", "", key.path)
        assert "." not in key.path or parent in paths, f"{key.path}: no key {parent}"


def test_every_key_the_parser_reads_is_in_the_schema(reads: list[Read]) -> None:
    unknown = sorted({r.path for r in reads} - set(by_path()))
    assert not unknown, f"keys the parser reads that SCHEMA lacks: {unknown}"


def test_every_schema_key_is_read_by_some_policy(reads: list[Read]) -> None:
    read = {r.path for r in reads if r.how != "has"}
    never = [k.path for k in SCHEMA if k.path not in read]
    assert not never, f"SCHEMA keys that no policy makes the parser read: {never}"


def test_the_defaults_the_parser_passes_are_the_schema_defaults(reads: list[Read]) -> None:
    schema = by_path()
    wrong: list[str] = []
    checked = set()
    for read in reads:
        if read.how != "get" or read.default is None:
            continue
        key = schema[read.path]
        if any(k in read.item for k in DEFAULT_ASSUMES.get(key.path, ())):
            continue
        checked.add(key.path)
        if read.default in ((), []):  # nothing one can write gives an empty default
            if key.default is not None:
                wrong.append(f"{key.path}: the parser has no default, SCHEMA {key.default!r}")
            continue
        if key.default is None:
            wrong.append(f"{key.path}: the parser's default {read.default!r}, SCHEMA none")
            continue
        expected = expected_default(key, read.item, read.index)
        if show(read.default) == expected:
            continue
        assert read.convert is not None
        try:
            same = read.convert(yaml.safe_load(expected)) == read.default
        except (ValueError, TypeError):
            same = False
        if not same:
            wrong.append(f"{key.path}: the parser's default {read.default!r}, SCHEMA {expected!r}")
    assert not wrong, sorted(set(wrong))
    assert {"version", "spm_pools[].id", "meters[].pir", "nat.ports"} <= checked


@pytest.mark.parametrize("path", [k.path for k in SCHEMA if k.default is not None])
def test_a_key_left_out_takes_the_schema_default(path: str) -> None:
    """The maximal policy without the key loads as the policy with the key at its default."""
    key = by_path()[path]
    without, at_default = every_key_data(), every_key_data()
    gone, kept = first_place(without, key), first_place(at_default, key)
    written = expected_default(key, kept.parent, kept.index)
    del gone.parent[gone.key]
    kept.parent[kept.key] = yaml.safe_load(written)
    for sibling in DEFAULT_ASSUMES.get(path, ()):
        gone.parent.pop(sibling, None)
        kept.parent.pop(sibling, None)
    assert load_data(without) == load_data(at_default), f"{path}: {written}"


@pytest.mark.parametrize("path", [k.path for k in SCHEMA])
def test_a_key_is_required_when_the_parser_misses_it(path: str) -> None:
    """Leaving the key out of the maximal policy is a "missing" error at that field exactly
    when SCHEMA says the key is required."""
    key = by_path()[path]
    data = every_key_data()
    place = first_place(data, key)
    del place.parent[place.key]
    try:
        load_data(data)
    except ConfigError as error:
        missing = error.message == "missing" and error.field == place.field
    else:
        missing = False
    assert missing == key.required, f"{place.field}: required is {key.required}"


def test_the_maximal_policy_differs_from_the_defaults() -> None:
    """Each key with a default is at another value in the maximal policy (else leaving it out
    proves nothing), except the versions, which have one value."""
    data = every_key_data()
    same = []
    for key in SCHEMA:
        if key.default is None or key.path in ("version", "ipsec.tunnels[].ike_version"):
            continue
        place = first_place(data, key)
        written = yaml.safe_load(expected_default(key, place.parent, place.index))
        if place.parent[place.key] == written:
            same.append(key.path)
    assert not same, same


def test_the_maximal_policy_has_every_section() -> None:
    assert set(every_key_data()) == set(top_level())


def test_reference_page_lists_every_key_and_real_errors() -> None:
    from docgen import policy as page

    text = page.render()
    assert text.splitlines()[0] == page.HEADER
    assert text == page.render()
    for top in top_level():
        assert f"\n## `{top}`\n" in text
    for key in SCHEMA:
        assert f"| `{key.path}` |" in text
    errors = text.split("\n## Errors\n", 1)[1]
    assert errors.count("policy.yaml:") >= 12
    assert str(ROOT) not in text
