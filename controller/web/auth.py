"""Who may use the web console: the API token, or a user of the console's users file, whose
password is kept as a salted scrypt hash. A login opens a console session, a random id in an
HttpOnly, SameSite=Strict cookie; the sessions live in this process's memory (a restart logs
everybody out) and end at logout or after `SESSION_SECONDS`.

The users file has one `NAME:scrypt$N$r$p$SALT$HASH` line per user (hex salt and hash);
`opengate console-user NAME` prints such a line. `#` starts a comment.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from opengate.errors import ConfigError

SESSION_SECONDS = 8 * 3600.0
COOKIE = "opengate_console"
# scrypt's cost: about 50 ms and 16 MiB per check, so that a stolen file is slow to guess.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 14, 8, 1


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32
    )
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${salt.hex()}${digest.hex()}"


def check_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        given = hashlib.scrypt(
            password.encode(),
            salt=bytes.fromhex(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            dklen=len(digest) // 2,
            maxmem=128 * int(n) * int(r) * int(p) + (1 << 20),
        )
    except ValueError:
        return False
    return hmac.compare_digest(given.hex(), digest)


def load_users(path: Path) -> dict[str, str]:
    """NAME -> hash from a users file; an unreadable or malformed file is a ConfigError."""
    try:
        lines = path.read_text().splitlines()
    except OSError as error:
        message = f"cannot read the console users: {error.strerror}"
        raise ConfigError(message, path=str(path)) from None
    users: dict[str, str] = {}
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, stored = line.partition(":")
        if not sep or not name or not stored.startswith("scrypt$") or stored.count("$") != 5:
            raise ConfigError(
                "expected NAME:scrypt$N$r$p$SALT$HASH (see `opengate console-user`)",
                path=str(path),
                line=number,
            )
        users[name] = stored
    return users


@dataclass(slots=True)
class ConsoleSession:
    user: str
    expires: float


class Logins:
    """Checks credentials and keeps the console's sessions."""

    def __init__(self, token: str, users: dict[str, str] | None = None) -> None:
        self._token = token.encode()
        self._users = dict(users or {})
        self._sessions: dict[str, ConsoleSession] = {}
        self._lock = threading.Lock()

    def check(self, user: str, secret: str) -> str | None:
        """The name the console shows if the credentials are good, else None. An empty user
        name means the API token."""
        if not user:
            if hmac.compare_digest(secret.encode(), self._token):
                return "token"
            return None
        stored = self._users.get(user)
        if stored is None:
            # as slow as a real check, so that a wrong name and a wrong password look alike
            check_password(secret, hash_password("", b"\0" * 16))
            return None
        return user if check_password(secret, stored) else None

    def open(self, user: str, now: float | None = None) -> str:
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[sid] = ConsoleSession(
                user, (now if now is not None else time.monotonic()) + SESSION_SECONDS
            )
        return sid

    def user_of(self, sid: str | None, now: float | None = None) -> str | None:
        if not sid:
            return None
        now = now if now is not None else time.monotonic()
        with self._lock:
            session = self._sessions.get(sid)
            if session is None:
                return None
            if session.expires < now:
                del self._sessions[sid]
                return None
            return session.user

    def close(self, sid: str | None) -> None:
        if sid:
            with self._lock:
                self._sessions.pop(sid, None)

    def bearer_ok(self, header: str) -> bool:
        return hmac.compare_digest(header.encode(), b"Bearer " + self._token)
