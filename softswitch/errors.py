"""Exceptions of the software switch."""

from __future__ import annotations


class LoadError(ValueError):
    """The BMv2 JSON cannot be executed; the message names the construct and where it is."""


class ParserError(Exception):
    """Raised inside a parser state: the packet's parse ends with this error code."""

    __slots__ = ("code",)

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class AssertionFailed(Exception):  # noqa: N818 - named after the P4 statement
    """A P4 `assert`/`assume` failed while processing a packet (the packet is dropped)."""
