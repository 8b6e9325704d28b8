"""Errors of the controller's requests, and the types that keep what a request carries to what
the controller can hold: text the database can store, integers its columns take."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints

from controller.db import BIGINT_MAX
from opengate.yamlconf import text_problem


class RequestError(Exception):
    """A request the controller refuses, with the HTTP status the API answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    @property
    def is_refusal(self) -> bool:
        """The client's error (4xx): the request is refused, nothing in the controller failed."""
        return self.status < 500


def storable(text: str) -> str:
    """`text`, if the database can store it (for a pydantic AfterValidator)."""
    problem = text_problem(text)
    if problem is not None:
        raise ValueError(f"the text {problem}")
    return text


# Text the database can store: no NUL (a pattern, so that the schema says so too) and no lone
# surrogate (which JSON's "\\ud800" can carry).
_NO_NUL = r"^[^\x00]*$"
Text = Annotated[str, StringConstraints(pattern=_NO_NUL), AfterValidator(storable)]
Text10 = Annotated[str, StringConstraints(max_length=10, pattern=_NO_NUL), AfterValidator(storable)]
Text20 = Annotated[str, StringConstraints(max_length=20, pattern=_NO_NUL), AfterValidator(storable)]
Text50 = Annotated[str, StringConstraints(max_length=50, pattern=_NO_NUL), AfterValidator(storable)]
Text64 = Annotated[str, StringConstraints(max_length=64, pattern=_NO_NUL), AfterValidator(storable)]
Text100 = Annotated[
    str, StringConstraints(max_length=100, pattern=_NO_NUL), AfterValidator(storable)
]
Text4096 = Annotated[
    str, StringConstraints(max_length=4096, pattern=_NO_NUL), AfterValidator(storable)
]
# The largest integer a request may carry: JSON's interoperable range (RFC 8259, section 6:
# up to 2**53 - 1, exact as an IEEE 754 double, so that a schema's bound means the same to every
# client), within what the database's BigInteger columns hold.
JSON_INT_MAX = min(2**53 - 1, BIGINT_MAX)
# A count or an id.
Count = Annotated[int, Field(ge=0, le=JSON_INT_MAX)]
