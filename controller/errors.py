"""Errors of the controller's requests."""

from __future__ import annotations


class RequestError(Exception):
    """A request the controller refuses, with the HTTP status the API answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
