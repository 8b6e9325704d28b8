"""YAML loading that remembers line numbers, for config errors that name file, line and field.

Mappings load as `LineDict` (a dict with `.line` and `.key_lines`), sequences as `LineList`
(a list with `.line` and `.item_lines`). `Reader` walks them and raises ConfigError naming the
place of whatever is wrong.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from opengate.errors import ConfigError

T = TypeVar("T")


class LineDict(dict[str, Any]):
    line: int = 0
    key_lines: dict[str, int]


class LineList(list[Any]):
    line: int = 0
    item_lines: list[int]


class _Loader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    result = LineDict()
    result.line = node.start_mark.line + 1
    result.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        key = str(key)
        if key in result:
            raise ConfigError(
                f"duplicate key {key!r}", line=key_node.start_mark.line + 1, field=key
            )
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = key_node.start_mark.line + 1
    return result


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> LineList:
    result = LineList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read: {error.strerror}", path=str(path)) from None
    return load_yaml_text(text, path)


def load_yaml_text(text: str, path: str | Path) -> Any:
    """Parse YAML that is already in memory (e.g. a policy sent to the REST API); `path` names
    it in errors."""
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
    except ConfigError as error:
        raise ConfigError(
            error.message, path=str(path), line=error.line, field=error.field
        ) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(error, "problem", None) or str(error)
        raise ConfigError(f"not valid YAML: {problem}", path=str(path), line=line) from None


class Reader:
    """Typed access to one mapping of a YAML file, with errors that say where."""

    def __init__(self, path: str | Path, data: Any, where: str = "", line: int = 1) -> None:
        self.path = str(path)
        self.where = where
        if not isinstance(data, dict):
            raise ConfigError(
                f"expected a mapping, got {_kind(data)}",
                path=self.path,
                line=line,
                field=where or None,
            )
        self.data: dict[str, Any] = data
        self.line = getattr(data, "line", line)
        self._lines: dict[str, int] = getattr(data, "key_lines", {})
        self._used: set[str] = set()

    def field_name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def line_of(self, key: str) -> int:
        return self._lines.get(key, self.line)

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(
            message, path=self.path, line=self.line_of(key), field=self.field_name(key)
        )

    def has(self, key: str) -> bool:
        return key in self.data

    def get(
        self, key: str, convert: Callable[[Any], T], default: T | None = None, required: bool = True
    ) -> T:
        self._used.add(key)
        if key not in self.data:
            if default is not None or not required:
                return default  # type: ignore[return-value]
            raise ConfigError("missing", path=self.path, line=self.line, field=self.field_name(key))
        try:
            return convert(self.data[key])
        except ConfigError:
            raise
        except (ValueError, TypeError) as error:
            raise self.error(key, str(error)) from None

    def sub(self, key: str) -> Reader:
        self._used.add(key)
        if key not in self.data:
            raise ConfigError("missing", path=self.path, line=self.line, field=self.field_name(key))
        return Reader(self.path, self.data[key], self.field_name(key), self.line_of(key))

    def items(self, key: str, required: bool = True) -> list[Reader]:
        """The mappings of a list under `key`."""
        self._used.add(key)
        value = self.data.get(key)
        if value is None:
            if required:
                raise ConfigError(
                    "missing", path=self.path, line=self.line, field=self.field_name(key)
                )
            return []
        if not isinstance(value, list):
            raise self.error(key, f"expected a list, got {_kind(value)}")
        lines = getattr(value, "item_lines", [self.line_of(key)] * len(value))
        return [
            Reader(self.path, item, f"{self.field_name(key)}[{i}]", lines[i])
            for i, item in enumerate(value)
        ]

    def reject_unknown(self) -> None:
        """Unknown keys are errors (a typo must not silently do nothing)."""
        for key in self.data:
            if key not in self._used:
                known = ", ".join(sorted(self._used)) or "none"
                raise self.error(key, f"unknown field (known here: {known})")


def _kind(value: Any) -> str:
    return type(value).__name__ if value is not None else "nothing"


# Converters for Reader.get -------------------------------------------------------------


def as_str(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value


def as_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def as_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def as_mac(value: Any) -> str:
    text = as_str(value).lower()
    parts = text.split(":")
    if len(parts) != 6 or not all(
        len(p) == 2 and all(c in "0123456789abcdef" for c in p) for p in parts
    ):
        raise ValueError(f"not a MAC address: {value!r}")
    return text


def as_ipv4(value: Any) -> ipaddress.IPv4Address:
    try:
        return ipaddress.IPv4Address(as_str(value))
    except ipaddress.AddressValueError:
        raise ValueError(f"not an IPv4 address: {value!r}") from None


def as_ipv4_interface(value: Any) -> ipaddress.IPv4Interface:
    try:
        return ipaddress.IPv4Interface(as_str(value))
    except (ipaddress.AddressValueError, ipaddress.NetmaskValueError):
        raise ValueError(f"not an IPv4 address/prefix: {value!r}") from None


def one_of(*choices: str) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"{value!r} is not one of: {', '.join(choices)}")
        return str(value)

    return convert
