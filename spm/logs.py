"""Loggers that carry their context (SPM name, worker) in every message."""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any


class ContextLogger(logging.LoggerAdapter[logging.Logger]):
    """Prefixes each message with `context` ("spm spm1 worker 2")."""

    def __init__(self, logger: logging.Logger, context: str) -> None:
        super().__init__(logger, {"context": context})
        self.context = context

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        return f"{self.context}: {msg}", kwargs
