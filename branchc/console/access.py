"""Who is looking at the console, what they may see and do, and the checks every request passes.

- **Who.** With authentication (`--auth-tokens` or `--auth-jwks`, the verifiers of bridge/auth.py), a request
  says who it is by `Authorization: Bearer TOKEN` (scripts), or by the session cookie that signing in with a
  token sets (a browser): the cookie holds the token sealed (AES-256-GCM under a key derived from the state key
  for this purpose only), and the token is verified again at every request, so a token taken out of the file (or
  an expired JWT) ends its sessions at once. The principal is the one a run records as its owner
  (`principal_of`). Without authentication the console serves loopback only, and whoever reaches it is the local
  user, an operator.
- **What.** A principal sees and acts on its own runs; operators (`--operators`, `BRANCHC_OPERATORS`) on all.
  A run of someone else is answered exactly as an unknown one (404), as every other handle to a run is.
- **Checks.** Every request names a Host this console serves (`--allowed-hosts`, else the address it binds: DNS
  rebinding), and a POST's Origin (or, without one, its Referer) is one of its origins. Every POST carries a CSRF
  token: an HMAC of a random per-browser cookie and the principal (a signed double-submit cookie), so a page of
  another site can neither read it nor make one; a POST without it, or with another's, gets 403.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from mcp.server.auth.provider import TokenVerifier
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request

from ..bridge.auth import principal_of
from ..store.base import RunRecord
from ..store.keys import KeyRing

__all__ = ["LOCAL_USER", "Access", "Viewer"]

LOCAL_USER = "local user"  # who a console without authentication serves: the user of this machine
SESSION_COOKIE = "branchc_console_session"
CSRF_COOKIE = "branchc_console_csrf"
CSRF_FIELD = "csrf"
SESSION_SECONDS = 8 * 3600  # a browser session lasts this long at most (and never past its token's expiry)
MAX_TOKEN = 8192  # a token longer than this is refused before it is verified
_PURPOSE = b"branchc console"


@dataclass(frozen=True)
class Viewer:
    """Who a request is: its principal (None: the local user of a console without authentication), whether it is
    an operator, and how it said so ("bearer", "session", "local")."""

    principal: str | None
    operator: bool
    how: str

    @property
    def name(self) -> str:
        return self.principal if self.principal is not None else LOCAL_USER

    def sees(self, record: RunRecord) -> bool:
        """Whether this viewer may see (and act on) the run: its owner, or an operator."""
        return self.operator or (self.principal is not None and record.owner == self.principal)


def _derive(secret: bytes, what: bytes) -> bytes:
    return HKDF(algorithm=SHA256(), length=32, salt=None, info=_PURPOSE + b"/v1/" + what).derive(secret)


class Access:
    """The console's checks (see the module's doc): who a request is, its session cookie, its CSRF token, its
    Host and Origin. `keys`: the state keys, whose first one the session and CSRF keys are derived from (so
    sessions outlive a restart and hold across replicas); `operators`: the principals that see every run."""

    def __init__(
        self,
        keys: KeyRing,
        verifier: TokenVerifier | None,
        operators: frozenset[str],
        security: TransportSecuritySettings,
    ) -> None:
        secret = keys.secrets[0]
        self._seal = AESGCM(_derive(secret, b"session"))
        self._csrf = _derive(secret, b"csrf")
        self.verifier = verifier
        self.operators = operators
        self.security = security

    @property
    def authenticates(self) -> bool:
        return self.verifier is not None

    # -- who --------------------------------------------------------------------------------------------------

    async def viewer(self, request: Request) -> Viewer | None:
        """Who sent `request`; None when it must sign in first (or its token no longer holds)."""
        if self.verifier is None:
            return Viewer(None, True, "local")
        header = request.headers.get("authorization", "")
        if header[:7].lower() == "bearer ":
            how, token = "bearer", header[7:].strip()
        else:
            how, token = "session", self.opened(request.cookies.get(SESSION_COOKIE, ""))
        principal = await self.principal(token) if token else None
        if principal is None:
            return None
        return Viewer(principal, principal in self.operators, how)

    async def principal(self, token: str) -> str | None:
        """The principal `token` stands for, verified now; None when it does not verify or has expired."""
        if self.verifier is None or not token or len(token) > MAX_TOKEN:
            return None
        access = await self.verifier.verify_token(token)
        if access is None or (access.expires_at is not None and access.expires_at < time.time()):
            return None
        return principal_of(access)

    async def expires(self, token: str) -> float:
        """When a session signed in with `token` ends: SESSION_SECONDS from now, or the token's expiry if sooner."""
        access = await self.verifier.verify_token(token) if self.verifier is not None else None
        end = time.time() + SESSION_SECONDS
        return min(end, access.expires_at) if access is not None and access.expires_at else end

    # -- the session cookie -----------------------------------------------------------------------------------

    def sealed(self, token: str, until: float) -> str:
        """The session cookie's value for `token`, good until `until` (epoch seconds)."""
        nonce = os.urandom(12)
        body = f"{int(until)}\n{token}".encode()
        return base64.urlsafe_b64encode(nonce + self._seal.encrypt(nonce, body, _PURPOSE)).decode()

    def opened(self, value: str) -> str:
        """The token a session cookie holds; "" when it is not one of ours or has ended."""
        if not value or len(value) > 2 * MAX_TOKEN:
            return ""
        try:
            raw = base64.urlsafe_b64decode(value.encode())
            body = self._seal.decrypt(raw[:12], raw[12:], _PURPOSE).decode()
        except (ValueError, InvalidTag, UnicodeDecodeError):
            return ""
        until, _, token = body.partition("\n")
        return token if until.isdigit() and int(until) > time.time() else ""

    # -- CSRF -------------------------------------------------------------------------------------------------

    @staticmethod
    def new_seed() -> str:
        return secrets.token_urlsafe(32)

    def csrf_token(self, seed: str, viewer: Viewer | None) -> str:
        """The token a form sends back: bound to this browser's seed cookie and to who it is."""
        who = "" if viewer is None else viewer.name
        return hmac.new(self._csrf, f"{seed}\n{who}".encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, request: Request, sent: str, viewer: Viewer | None) -> bool:
        seed = request.cookies.get(CSRF_COOKIE, "")
        if not seed or not sent:
            return False
        return hmac.compare_digest(sent, self.csrf_token(seed, viewer))

    # -- Host and Origin --------------------------------------------------------------------------------------

    def host_ok(self, host: str | None) -> bool:
        """The Host header names this console (what the SDK's transport security checks for /mcp)."""
        return bool(host) and _matches(host, self.security.allowed_hosts)

    def origin_ok(self, request: Request) -> bool:
        """A POST comes from a page of this console: its Origin, else its Referer's, is one of its origins (a
        request with neither is a script's, not a browser's: the CSRF token still holds it)."""
        origin = request.headers.get("origin")
        if origin is None:
            referer = request.headers.get("referer")
            if referer is None:
                return True
            parts = urlsplit(referer)
            origin = f"{parts.scheme}://{parts.netloc}"
        return origin != "null" and _matches(origin, self.security.allowed_origins)


def _matches(value: str, patterns: list[str]) -> bool:
    """`value` is one of `patterns` (HOST:PORT, or HOST:* for any port), as the SDK's transport security reads them."""
    for pattern in patterns:
        if value == pattern:
            return True
        if pattern.endswith(":*"):
            base, _, port = value.rpartition(":")
            if base == pattern[:-2] and port.isdigit():
                return True
    return False
