"""Who is calling: the token verifiers `branchc serve --http` (and `mount` users) authenticate with, and
the principal each run belongs to.

The SDK does the HTTP side: `streamable_http_app(auth=..., token_verifier=...)` installs its bearer
middleware (401 with `WWW-Authenticate`), and its protected-resource metadata (RFC 9728) when there is an
authorization server to point at. Two verifiers ship:

- `TokenFileVerifier`: a file of `PRINCIPAL TOKEN` lines, for self-hosting. The file must be readable by
  its owner only; tokens are compared in constant time; `reload()` (on SIGHUP) reads it again.
- `JwtVerifier`: JWTs of an OAuth authorization server, checked against its JWKS (a URL, fetched and
  cached, fetched again for a key it does not know; or a file, read again when it changes): signature by
  an asymmetric key, `exp`, `nbf`, `iss` and `aud`.

A run belongs to the principal that started it (`principal_of`): every handle to it (the sealed
`request_state`, which the SDK binds to the same principal, a store reference, a guided `state_id`) is
refused to anyone else exactly as an unknown one is.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import jwt
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier, principal_components
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings

from .settings import ServeSettings, SettingsError, is_loopback

__all__ = [
    "ANONYMOUS_WARNING",
    "AuthConfigError",
    "JwtVerifier",
    "TokenFileVerifier",
    "check_exposure",
    "current_principal",
    "http_auth",
    "principal_of",
    "transport_security",
    "verifier",
]

WILDCARDS = ("0.0.0.0", "::", "")  # binds that listen on every address
ANONYMOUS_WARNING = (
    "warning: serving on {host} with no authentication (--allow-anonymous): anyone who can reach it may call "
    "every tool and continue any run they learn the handle of"
)


class AuthConfigError(SettingsError):
    """A token file or JWKS that cannot be used; the message names the file (and line) and the fix."""


def principal_of(token: AccessToken | None) -> str | None:
    """The principal a token stands for, as runs record their owner: the token file's name for it, or the
    JWT's subject with its issuer. None: no authentication (anonymous)."""
    if token is None:
        return None
    client, issuer, subject = principal_components(token)
    if issuer is None:
        return subject or client
    return f"{subject or client}@{issuer}"


def current_principal() -> str | None:
    """The principal of the request being handled (None when the transport does not authenticate)."""
    return principal_of(get_access_token())


# -- a token file ------------------------------------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@:+-]{0,127}")
MIN_TOKEN = 16


@dataclass(frozen=True)
class _Entry:
    principal: str
    digest: bytes  # sha256 of the token: every comparison is of 32 bytes, whatever was sent


class TokenFileVerifier(TokenVerifier):
    """Bearer tokens from a file of `PRINCIPAL TOKEN` lines (blank lines and `#` comments allowed)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._entries = self._read()

    def _read(self) -> tuple[_Entry, ...]:
        where = self.path
        try:
            info = where.stat()
            text = where.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise AuthConfigError(f"--auth-tokens {where}: cannot read it ({error})") from None
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise AuthConfigError(
                f"--auth-tokens {where}: others may read it (mode {stat.filemode(info.st_mode)}); "
                f"make it its owner's only: chmod 600 {where}"
            )
        entries: list[_Entry] = []
        seen: set[bytes] = set()
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            place = f"--auth-tokens {where}:{number}"
            if len(parts) != 2:
                raise AuthConfigError(f"{place}: expected `PRINCIPAL TOKEN`, two words")
            principal, token = parts
            if not _NAME.fullmatch(principal):
                raise AuthConfigError(f"{place}: {principal!r} is not a principal name (letters, digits, ._@:+-)")
            if len(token) < MIN_TOKEN:
                raise AuthConfigError(
                    f"{place}: the token is shorter than {MIN_TOKEN} characters; "
                    f'make one with `python -c "import secrets; print(secrets.token_urlsafe(32))"`'
                )
            digest = hashlib.sha256(token.encode()).digest()
            if digest in seen:
                raise AuthConfigError(f"{place}: this token is given twice; each principal needs its own")
            seen.add(digest)
            entries.append(_Entry(principal, digest))
        if not entries:
            raise AuthConfigError(f"--auth-tokens {where}: it names no principal; add `PRINCIPAL TOKEN` lines")
        return tuple(entries)

    def reload(self) -> None:
        """Read the file again (SIGHUP); a file that cannot be used leaves the tokens as they were, and says
        why on stderr."""
        try:
            self._entries = self._read()
        except AuthConfigError as error:
            print(f"branchc: {error}; kept the tokens read before", file=sys.stderr)
            return
        print(f"branchc: --auth-tokens {self.path}: read again, {len(self._entries)} principal(s)", file=sys.stderr)

    async def verify_token(self, token: str) -> AccessToken | None:
        sent = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        found = None
        for entry in self._entries:  # every entry, always: the time says nothing of which matched
            if hmac.compare_digest(sent, entry.digest):
                found = entry
        if found is None:
            return None
        return AccessToken(token=token, client_id=found.principal, scopes=[], subject=found.principal)


# -- JWTs of an authorization server -------------------------------------------------------------------

ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
_JWKS_LIFESPAN = 300  # seconds a fetched JWKS is kept before it is fetched again


class JwtVerifier(TokenVerifier):
    """JWT access tokens, verified against the JWKS of their issuer: signed by one of its keys (asymmetric
    algorithms only), `iss` and `aud` as configured, within `exp` and `nbf` (`leeway` seconds of clock skew)."""

    def __init__(
        self, jwks: str, issuer: str, audience: str, *, leeway: float = 30, refresh_cooldown: float = 30
    ) -> None:
        """`refresh_cooldown`: a token naming a key the cached JWKS lacks fetches it again, at most once in so
        many seconds (so tokens with made-up key ids cannot make the server hammer the issuer)."""
        self.issuer, self.audience, self.leeway = issuer, audience, leeway
        self._url = jwks if jwks.startswith(("https://", "http://")) else None
        self._client = (
            jwt.PyJWKClient(
                jwks, cache_keys=True, lifespan=_JWKS_LIFESPAN, timeout=10, cooldown_duration=refresh_cooldown
            )
            if self._url
            else None
        )
        self._file = None if self._url else Path(jwks)
        self._keys: dict[str | None, jwt.PyJWK] = {}
        self._read_at: float | None = None
        if self._file is not None:
            self._load_file()

    def _load_file(self) -> None:
        assert self._file is not None
        try:
            mtime = self._file.stat().st_mtime
            if mtime == self._read_at:
                return
            keys = jwt.PyJWKSet.from_dict(json.loads(self._file.read_text(encoding="utf-8"))).keys
        except (OSError, ValueError, jwt.PyJWKSetError) as error:
            raise AuthConfigError(f"--auth-jwks {self._file}: not a JWKS this server can use ({error})") from None
        self._keys = {key.key_id: key for key in keys}
        self._read_at = mtime

    def _signing_key(self, token: str) -> Any:
        if self._client is not None:
            return self._client.get_signing_key_from_jwt(token).key
        self._load_file()
        kid = jwt.get_unverified_header(token).get("kid")
        key = self._keys.get(kid) or (next(iter(self._keys.values())) if kid is None and len(self._keys) == 1 else None)
        if key is None:
            raise jwt.InvalidTokenError(f"no key {kid!r} in the JWKS")
        return key.key

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            key = await anyio.to_thread.run_sync(self._signing_key, token)
            claims = jwt.decode(
                token,
                key,
                algorithms=ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except (jwt.PyJWTError, AuthConfigError, ValueError) as error:
            print(f"branchc: a bearer token was refused: {error}", file=sys.stderr)
            return None
        scopes = claims.get("scope") or claims.get("scp") or []
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id") or claims.get("azp") or claims["sub"]),
            scopes=scopes.split() if isinstance(scopes, str) else [str(scope) for scope in scopes],
            expires_at=int(claims["exp"]),
            subject=str(claims["sub"]),
            claims=claims,
        )


# -- the HTTP side --------------------------------------------------------------------------------------


def verifier(settings: ServeSettings) -> TokenVerifier | None:
    """The verifier the settings name, or None (no authentication)."""
    if settings.auth_tokens is not None:
        return TokenFileVerifier(settings.auth_tokens)
    if settings.auth_jwks is not None:
        assert settings.auth_issuer is not None and settings.auth_audience is not None  # checked by the settings
        return JwtVerifier(settings.auth_jwks, settings.auth_issuer, settings.auth_audience)
    return None


def http_auth(settings: ServeSettings, token_verifier: TokenVerifier | None) -> dict[str, Any]:
    """`streamable_http_app` keywords for auth: the verifier, and AuthSettings. The protected-resource metadata
    (RFC 9728) names the authorization server, so it is served with JWTs only; a token file has none."""
    if token_verifier is None:
        return {}
    host, port = settings.host_port or ("127.0.0.1", 0)
    public = settings.public_url or f"http://{_bracketed(host)}:{port}"
    if settings.auth_jwks is not None:
        auth = AuthSettings(
            issuer_url=settings.auth_issuer,
            resource_server_url=f"{public.rstrip('/')}/mcp",
            validate_token_resource=False,  # the verifier checks `aud`
        )
    else:
        auth = AuthSettings(issuer_url=public, resource_server_url=None)
    return {"auth": auth, "token_verifier": token_verifier}


def transport_security(settings: ServeSettings) -> TransportSecuritySettings:
    """Host and Origin are checked wherever the server binds: against --allowed-hosts, else the address it
    binds (and, on loopback, localhost's names)."""
    host, port = settings.host_port or ("127.0.0.1", 0)
    hosts = list(settings.allowed_hosts)
    if not hosts:
        hosts = [f"{_bracketed(host)}:{port}"]
        if is_loopback(host):
            hosts += [f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"]
    with_port = [name if _has_port(name) else f"{name}:*" for name in hosts]
    allowed_hosts = sorted({*with_port, *(name for name in hosts if not _has_port(name))})
    origins = sorted({f"{scheme}://{name}" for name in with_port for scheme in ("http", "https")})
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=allowed_hosts, allowed_origins=origins
    )


def check_exposure(settings: ServeSettings, token_verifier: TokenVerifier | None) -> str | None:
    """What serving off loopback needs, checked before the server starts (SettingsError): authentication,
    unless --allow-anonymous (then the warning to print); and, listening on every address, the host names
    clients use (--allowed-hosts), since no other Host can be told from a forged one."""
    host_port = settings.host_port
    if host_port is None or is_loopback(host_port[0]):
        return None
    if host_port[0] in WILDCARDS and not settings.allowed_hosts:
        raise SettingsError(
            f"--http {settings.http} listens on every address: name the hosts clients reach it by with "
            f"--allowed-hosts (e.g. --allowed-hosts mcp.example.com,10.0.0.5:{host_port[1]}); requests naming "
            f"any other Host are refused"
        )
    if token_verifier is not None:
        return None
    if not settings.allow_anonymous:
        raise SettingsError(
            f"--http {settings.http}: anyone who can reach this address could call every tool, and no one is "
            f"asked who they are; give --auth-tokens FILE or --auth-jwks URL --auth-issuer ISS --auth-audience AUD, "
            f"bind 127.0.0.1, or --allow-anonymous to serve with no authentication anyway"
        )
    return ANONYMOUS_WARNING.format(host=settings.http)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _has_port(name: str) -> bool:
    return bool(re.fullmatch(r".*:(\d+|\*)", name)) and not (name.startswith("[") and name.endswith("]"))
