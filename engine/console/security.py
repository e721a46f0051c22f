"""Who may use the console and how: the bind rule, the token check, CSRF tokens. Pure, no I/O.

- Loopback by default. Binding any other address needs a token (``--token``): a browser
  sends it as the password of HTTP basic auth (the user name it gives is who asks), a
  script as ``Authorization: Bearer TOKEN``.
- Every action is a POST carrying a CSRF token equal to the console's cookie (double
  submit; the cookie is ``SameSite=Strict`` and ``HttpOnly``, the pages put its value in
  each form): a POST from another site cannot know it and is refused with 403.
- ``--read-only`` hides every action and refuses every POST.
- Without a token, a request whose ``Host`` is not a loopback name is refused (DNS rebinding).
"""

from __future__ import annotations

import base64
import hmac
import ipaddress
import secrets
import socket
from dataclasses import dataclass

from engine.errors import ConfigError

CSRF_COOKIE = "epochq_csrf"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"


@dataclass(frozen=True)
class ConsoleAccess:
    """The console's security settings: where it listens, the token it asks for, whether it may act."""

    host: str = "127.0.0.1"
    port: int = 8080
    token: str | None = None
    read_only: bool = False

    def __post_init__(self) -> None:
        if not is_loopback(self.host) and not self.token:
            raise ConfigError(f"console: binding {self.host} (not loopback) needs --token T "
                              "(or EPOCHQ_CONSOLE_TOKEN); without one it serves 127.0.0.1 only")
        if self.token is not None and len(self.token) < 8:
            raise ConfigError("console: --token must be at least 8 characters")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_ok(host_header: str | None, token: str | None) -> bool:
    """Whether a request's Host may be served: any with a token; without one, only a loopback name.

    A console without a token trusts whoever reaches it on loopback; a page of another site whose
    name was made to resolve to 127.0.0.1 (DNS rebinding) would reach it too, with its own name in
    Host, and read its pages and CSRF token as its own: that Host is refused.
    """
    if token is not None:
        return True
    name = (host_header or "").strip().lower()
    if name.startswith("["):
        name = name[1:].split("]", 1)[0]
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    return is_loopback(name)


def caller(authorization: str | None, token: str | None) -> str | None:
    """Who asks, from the Authorization header: "" when no token is needed, None when refused.

    Basic auth: any user name, the token as password (the name is who asks). Bearer: the token.
    """
    if token is None:
        return ""
    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() == "bearer" and _same(value.strip(), token):
        return ""
    if scheme.lower() == "basic":
        user, password = _basic(value.strip())
        if password is not None and _same(password, token):
            return user
    return None


def _basic(value: str) -> tuple[str, str | None]:
    try:
        user, sep, password = base64.b64decode(value, validate=True).decode("utf-8").partition(":")
    except (ValueError, UnicodeDecodeError):
        return "", None
    return (user, password) if sep else ("", None)


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def requested_by(user: str) -> str:
    """What actions record as who asked: the basic-auth user, else ``console@<this host>``."""
    return user or f"console@{socket.gethostname()}"


def new_csrf_token() -> str:
    """A fresh CSRF token for a browser that has none."""
    return secrets.token_urlsafe(32)


def csrf_ok(cookie: str | None, submitted: str | None) -> bool:
    """Whether a POST's CSRF token (form field or header) matches the browser's cookie."""
    return bool(cookie) and bool(submitted) and _same(str(submitted), str(cookie))
