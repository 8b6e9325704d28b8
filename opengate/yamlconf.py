"""YAML loading that remembers line numbers, for config errors that name file, line and field.

Mappings load as `LineDict` (a dict with `.line` and `.key_lines`), sequences as `LineList`
(a list with `.line` and `.item_lines`). `Reader` walks them and raises ConfigError naming the
place of whatever is wrong.

What loads is bounded, so that no file or text handed in (a policy sent to the REST API, say)
can make the loader fail other than with a ConfigError: collections nest at most MAX_DEPTH deep,
every string is storable text (no NUL, no lone UTF-16 surrogate, which YAML's `\\0` and
`\\ud800` escapes could make), and `read_file` reads only regular files of at most
MAX_FILE_BYTES.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml

from opengate.errors import ConfigError

T = TypeVar("T")

# How deep mappings and sequences may nest: the policies nest five levels; PyYAML's composer
# recurses once per level and a few thousand levels exhaust Python's stack.
MAX_DEPTH = 64
# The largest file `read_file` reads (a policy with 100,000 ClassBench rules inline is 11 MB).
MAX_FILE_BYTES = 16 * 1024 * 1024


def text_problem(text: str) -> str | None:
    """Why `text` cannot be stored as text (PostgreSQL refuses NUL, UTF-8 has no lone
    surrogates), or None when it can."""
    if "\0" in text:
        return "holds a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"holds U+{ord(text[error.start]):04X}, a lone surrogate (not UTF-8 text)"
    return None


def read_file(path: str | Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The content of a regular file of at most `limit` bytes. OSError (its strerror says why)
    for anything else: a missing file, a path with a NUL, a FIFO or device (opened without
    blocking, never read), a file that is too large."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (ValueError, UnicodeError):  # a NUL in the path, a name the file system cannot hold
        raise OSError(errno.EINVAL, "not a valid file name") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > limit:
                raise OSError(errno.EFBIG, f"larger than {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str | Path, limit: int = MAX_FILE_BYTES) -> str:
    """`read_file`, decoded as UTF-8; OSError too for a file that is not UTF-8 text."""
    data = read_file(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise OSError(errno.EILSEQ, f"not UTF-8 text (byte {error.start})") from None


class LineDict(dict[str, Any]):
    line: int = 0
    key_lines: dict[str, int]


class LineList(list[Any]):
    line: int = 0
    item_lines: list[int]


class _Loader(yaml.SafeLoader):
    depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        # The composer recurses once per nesting level: bounded here, before the stack is.
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1  # type: ignore[no-untyped-call]
                raise ConfigError(f"nested more than {MAX_DEPTH} levels deep", line=line)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _construct_str(loader: _Loader, node: yaml.ScalarNode) -> str:
    value = str(loader.construct_scalar(node))
    problem = text_problem(value)
    if problem is not None:
        raise ConfigError(f"the text {value[:40]!r} {problem}", line=node.start_mark.line + 1)
    return value


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
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG, _construct_str)


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    try:
        text = read_text(path)
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
    except RecursionError:  # constructors and the caller's walk are bounded by MAX_DEPTH too
        raise ConfigError(f"nested more than {MAX_DEPTH} levels deep", path=str(path)) from None


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


def as_ipv6(value: Any) -> ipaddress.IPv6Address:
    try:
        return ipaddress.IPv6Address(as_str(value))
    except ipaddress.AddressValueError:
        raise ValueError(f"not an IPv6 address: {value!r}") from None


def as_ipv6_interface(value: Any) -> ipaddress.IPv6Interface:
    try:
        return ipaddress.IPv6Interface(as_str(value))
    except (ipaddress.AddressValueError, ipaddress.NetmaskValueError):
        raise ValueError(f"not an IPv6 address/prefix: {value!r}") from None


def one_of(*choices: str) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"{value!r} is not one of: {', '.join(choices)}")
        return str(value)

    return convert
