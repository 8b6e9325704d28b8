"""The project's two kinds of error.

`ConfigError`: something a user wrote is wrong (a policy, a rules file, an argument); the message
names the file, the line and the field. `P4RuntimeError` (in `opengate.p4rt`) is the other kind:
the switch refused something, with its per-update details.
"""

from __future__ import annotations


class ConfigError(Exception):
    """A user/config error: names where (file, line, field) and what is wrong."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        self.message = message
        self.path = path
        self.line = line
        self.field = field
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        field = f"{self.field}: " if self.field else ""
        return f"{where}{field}{self.message}"
