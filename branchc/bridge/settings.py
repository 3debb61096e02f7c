"""What a branchc server is told: one typed object that `branchc serve`, `create_server` and `mount` share.

Every field is a `branchc serve` flag (`state_ttl` is `--state-ttl`) and a `BRANCHC_*` environment
variable (`BRANCHC_STATE_TTL`) alike: `ServeSettings()` reads the environment, `ServeSettings(state_ttl=60)`
overrides it, and the CLI passes only the flags it was given. A bad value is one error naming the flag
(or variable) and the fix. The concerns that read these settings each live in a module of their own
(auth.py, limits.py, the store, the executors) and plug into the SDK's middleware chain or the bridge.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, Self

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from ..errors import BranchcError
from ..store.history import retention

if TYPE_CHECKING:
    from ..store.keys import KeyRing
    from .provider import ChatCompletionsProvider

__all__ = ["LOOPBACK", "PANELS", "ServeSettings", "SettingsError", "is_loopback"]

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def is_loopback(host: str) -> bool:
    """Whether a server bound to `host` is reachable from this machine only."""
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class SettingsError(BranchcError, ValueError):
    """Settings that cannot serve; the message names the flag and the environment variable, and the fix."""


class ServeSettings(BaseSettings):
    """How `branchc serve` (and `create_server`, `mount`) serves tools. The docstring of each field is the
    help of its flag."""

    model_config = SettingsConfigDict(
        env_prefix="BRANCHC_", extra="forbid", validate_default=True, use_attribute_docstrings=True
    )

    # -- where and how -------------------------------------------------------------------------------------
    http: str | None = None
    """Serve streamable HTTP at /mcp on HOST:PORT instead of stdio."""
    name: str = "branchc"
    """The server's name (and request_state audience)."""

    # -- who may call (auth.py) ---------------------------------------------------------------------------
    auth_tokens: Path | None = None
    """HTTP: a file of `PRINCIPAL TOKEN` lines (mode 0600); clients send `Authorization: Bearer TOKEN`.
    Re-read on SIGHUP."""
    auth_jwks: str | None = None
    """HTTP: accept JWTs signed by these keys (a JWKS URL or file), from an OAuth authorization server."""
    auth_issuer: str | None = None
    """With --auth-jwks: the tokens' issuer (`iss`), which must match exactly."""
    auth_audience: str | None = None
    """With --auth-jwks: the audience (`aud`) the tokens must name: this server."""
    public_url: str | None = None
    """HTTP: the URL clients reach this server by (behind a proxy), for its protected-resource metadata.
    Default: http://HOST:PORT."""
    allow_anonymous: bool = False
    """HTTP off loopback: serve without auth anyway (it warns)."""
    allowed_hosts: Annotated[list[str], NoDecode] = []
    """HTTP: the Host values (HOST or HOST:PORT, comma-separated) requests may name; their http(s) origins
    may send browser requests. Default: the address it binds (and localhost's names on loopback)."""
    operators: Annotated[list[str], NoDecode] = []
    """The principals (comma-separated, as runs record their owners) who see and act on every run in the runs
    console; everyone else, on their own runs. Without auth on loopback, the local user is an operator."""

    # -- state ----------------------------------------------------------------------------------------------
    state_key: SecretStr | None = None
    """Secret(s) (32+ bytes each) that seal request_state and stored runs: KEY, or NEW,OLD while keys rotate
    (the first seals, all open). Replicas share them. Default: a key made once in $BRANCHC_STATE_DIR/state.key."""
    state_ttl: float = Field(600, gt=0)
    """Seconds a round's request_state stays good."""
    store: str | None = None
    """Where runs wait between rounds: sqlite:///runs.db, redis://HOST:PORT/0, postgresql://USER@HOST:PORT/DB,
    or none (request_state carries the whole run). Default: HTTP, runs.db in $BRANCHC_STATE_DIR
    (~/.local/state/branchc); stdio, none."""

    history: str = "all"
    """With a store: how many past checkpoints of each run it keeps, for `branchc runs history` and `runs fork`:
    a number (0 keeps none), or all while the run lives."""

    max_runs: int = Field(10_000, ge=1)
    """With a store: most runs it holds waiting at once (every era, every caller); a new 2026-07-28 run past
    it is refused."""
    max_runs_mb: float = Field(1024, ge=0.001)
    """With a store: most MiB of saved state its waiting runs hold at once."""
    principal_max_runs: int = Field(100, ge=1)
    """With a store: most 2026-07-28 runs one caller may have waiting (all unauthenticated callers count as
    one)."""
    principal_max_mb: float = Field(64, ge=0.001)
    """With a store: most MiB of saved state one caller's waiting 2026-07-28 runs hold."""
    principal_max_calls: int = Field(32, ge=1)
    """Most calls one authenticated caller may have in progress at once; more are refused."""

    # -- who answers ---------------------------------------------------------------------------------------
    sampling: Literal["client", "provider", "auto"] = "client"
    """Who answers samples: the MCP client, a model endpoint (provider), or the client when it can (auto)."""
    provider_url: str | None = None
    """OpenAI-compatible API base, e.g. …/v1."""
    provider_model: str | None = None
    """The model to ask."""
    provider_key: SecretStr | None = None
    """Its API key, if it needs one."""
    guided: bool = False
    """Let the calling model answer what the client cannot (adds the branchc_resume tool)."""
    guided_ttl: float = Field(1800, ge=1)
    """Seconds a guided run waits for its answers."""
    guided_max_runs: int = Field(1000, ge=1)
    """Most guided runs waiting at once; more starts are refused."""
    guided_max_mb: float = Field(256, ge=0.001)
    """Most MiB of saved state guided runs hold at once."""
    answer_timeout: float = Field(3600, ge=0)
    """Seconds a client may take to answer a sample or a form mid-call (handshake era); 0: no limit. A client
    that disconnects ends its run at once, whatever this says."""

    # -- HTTP limits ---------------------------------------------------------------------------------------
    max_message_mb: float = Field(4, ge=0.001)
    """HTTP: most MiB in one message from a client; a bigger answer fails the request it answers."""
    session_timeout: float = Field(1800, ge=0)
    """HTTP: seconds an idle session is kept; 0: until deleted."""
    request_timeout: float = Field(30, gt=0)
    """HTTP: seconds a request's headers and body may take to arrive; a slower client is disconnected."""
    max_connections: int = Field(1000, ge=1)
    """HTTP: most connections at once; past it, requests are answered 503."""

    # -- where work runs -----------------------------------------------------------------------------------
    executor: str = "inline"
    """Where branch steps run: inline (this process), process (a pool of this machine's cores; process:N for N
    workers) or dask://HOST:PORT (a dask.distributed scheduler; pip install 'branchc[dask]')."""
    upstream: Annotated[list[str], NoDecode] = []
    """An MCP server whose tools ctx.call_tool(..., server=NAME) calls: NAME=stdio:COMMAND ARGS... (split as a
    shell splits words) or NAME=http://HOST:PORT/PATH; give the flag once per server (the variable: one per line)."""
    result_handlers: bool = False
    """Give every tool an optional result_handler parameter: a Python script run on the tool's output in a
    sandbox, whose value is returned instead of the output."""
    handler_upstreams: bool = False
    """With --result-handlers and --upstream: handlers may also call the upstream servers' tools
    (upstream.SERVER.NAME), which clients cannot call otherwise."""
    no_chaining: bool = False
    """With --result-handlers: a handler may not call other tools (no tools.NAME, no upstream.SERVER.NAME), and
    tools/list holds no wrappers for it."""
    handler_engine: Literal["monty", "cpython"] = "monty"
    """Where result handlers run: monty (an interpreter for a subset of Python, in worker processes) or cpython
    (full Python, each handler in a bubblewrap sandbox)."""
    unsafe_handlers: bool = False
    """With --handler-engine cpython where bubblewrap cannot run: run handlers with resource limits only, in no
    sandbox. Only for handlers you trust."""

    # -- operating ------------------------------------------------------------------------------------------
    otel: bool = False
    """Export OpenTelemetry traces, set up by the standard OTEL_* variables (OTEL_TRACES_EXPORTER=console prints
    them on stderr); pip install 'branchc[otel]'."""
    trace_content: bool = False
    """With --otel: spans may hold what users and models wrote (prompts, answers, sampled text); else sizes only."""
    console: bool = False
    """HTTP: also serve the runs console (in a browser) at /console, behind the same auth; needs a store."""
    trace_principal: bool = False
    """With --otel: a failed span names the caller's principal (enduser.id); else no span names one."""
    metrics: bool = False
    """HTTP: serve OpenTelemetry metrics for Prometheus at /metrics (behind the same auth as /mcp);
    pip install 'branchc[otel]'."""
    log_format: Literal["text", "json"] = "text"
    """How log lines on stderr look: text, or json (one object a line: time, level, message, and the run id,
    round, tool and principal where known)."""
    drain_timeout: float = Field(30, ge=0)
    """HTTP: on SIGTERM, seconds to finish the calls in flight (new ones get 503 with Retry-After) and hand the
    handshake-era runs still waiting on a client over to the store (released, for `branchc runs resume`)."""

    @field_validator("history")
    @classmethod
    def _history(cls, value: str) -> str:
        retention(value.strip().lower())  # a ValueError that says what it takes
        return value.strip().lower()

    @field_validator("http")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is None:
            return None
        host, _, port = value.rpartition(":")
        if not host or not port.isdigit() or int(port) > 65535:
            raise ValueError("give HOST:PORT, for example 127.0.0.1:8765")
        return value

    @field_validator("allowed_hosts", "operators", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("upstream", mode="before")
    @classmethod
    def _lines(cls, value: object) -> object:
        if isinstance(value, str):
            return [line.strip() for line in value.splitlines() if line.strip()]
        return value

    @field_validator("upstream")
    @classmethod
    def _upstreams(cls, value: list[str]) -> list[str]:
        from .upstream import Upstreams

        Upstreams(value)  # an UpstreamError (a ValueError) says which one is wrong and the form to give
        return value

    @field_validator("state_key", "provider_key", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("state_key")
    @classmethod
    def _key_ring(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            from ..store.keys import KeyRing

            KeyRing.parse(value.get_secret_value())  # a StoreKeyError (a ValueError) says what is wrong and the fix
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.sampling != "client" and (not self.provider_url or not self.provider_model):
            need = "needs --provider-url and --provider-model (the model endpoint)"
            raise ValueError(f"--sampling {self.sampling} {need}")
        jwt = (self.auth_jwks, self.auth_issuer, self.auth_audience)
        if any(jwt) and not all(jwt):
            raise ValueError("--auth-jwks, --auth-issuer and --auth-audience go together: give all three")
        if self.auth_tokens is not None and self.auth_jwks is not None:
            raise ValueError("--auth-tokens and --auth-jwks: give one way to authenticate")
        if self.console and self.http is None:
            raise ValueError("--console serves the runs console over HTTP: give --http HOST:PORT too")
        if self.console and (self.store or "").strip().lower() == "none":
            raise ValueError("--console shows the runs a store holds: give --store URL, not none")
        if self.console and not is_loopback(self.host_port[0]) and not self.authenticated:  # type: ignore[index]
            raise ValueError(
                f"--console on {self.http}: anyone who can reach it could see and end every run; give --auth-tokens "
                f"or --auth-jwks (--allow-anonymous does not open the console), or bind 127.0.0.1"
            )
        return self

    @property
    def host_port(self) -> tuple[str, int] | None:
        if self.http is None:
            return None
        host, _, port = self.http.rpartition(":")
        return host.strip("[]"), int(port)

    @property
    def authenticated(self) -> bool:
        return self.auth_tokens is not None or self.auth_jwks is not None

    @property
    def state_key_text(self) -> str | None:
        return self.state_key.get_secret_value() if self.state_key is not None else None

    def key_ring(self) -> KeyRing:
        """The state keys: --state-key's (the sealing one first), else the key kept in the state folder
        ($BRANCHC_STATE_DIR/state.key, made there once, mode 0600), so a restarted server opens what it sealed."""
        from ..store.keys import state_keys
        from .durable import state_dir

        return state_keys(self.state_key_text, state_dir())

    def provider(self) -> ChatCompletionsProvider:
        """The model endpoint `--sampling provider|auto` asks."""
        from .provider import ChatCompletionsProvider

        key = self.provider_key.get_secret_value() if self.provider_key is not None else None
        return ChatCompletionsProvider(self.provider_url or "", self.provider_model or "", api_key=key)

    def with_changes(self, **given: object) -> ServeSettings:
        """These settings with `given` changed, checked again (SettingsError)."""
        if not given:
            return self
        return type(self).load(**{**{name: getattr(self, name) for name in type(self).model_fields}, **given})

    @classmethod
    def load(cls, **given: object) -> ServeSettings:
        """The settings from the environment and `given` (what a caller or the CLI set), or a SettingsError
        naming each bad value by its flag and variable."""
        try:
            return cls(**given)
        except ValidationError as error:
            raise SettingsError(describe(error)) from None


_GROUPS = {
    "Who may call (HTTP)": "auth_tokens auth_jwks auth_issuer auth_audience public_url allow_anonymous allowed_hosts "
    "operators",
    "Runs and their state": "state_key state_ttl store history max_runs max_runs_mb principal_max_runs "
    "principal_max_mb principal_max_calls",
    "Who answers": "sampling provider_url provider_model provider_key guided guided_ttl guided_max_runs "
    "guided_max_mb answer_timeout",
    "HTTP limits": "max_message_mb session_timeout request_timeout max_connections",
    "Where work runs": "executor upstream result_handlers no_chaining handler_upstreams handler_engine unsafe_handlers",
    "Operating": "otel trace_content trace_principal metrics log_format drain_timeout console",
}
#: The help panel of each flag of `branchc serve` (the rest go under "Options").
PANELS = {name: panel for panel, names in _GROUPS.items() for name in names.split()}


def describe(error: ValidationError) -> str:
    """A pydantic error as the flags a user typed: `--state-ttl (BRANCHC_STATE_TTL): ...`."""
    lines = []
    for problem in error.errors():
        where = problem["loc"][0] if problem["loc"] else None
        message = problem["msg"].removeprefix("Value error, ")
        if isinstance(where, str):
            lines.append(f"--{where.replace('_', '-')} (BRANCHC_{where.upper()}): {message}")
        else:
            lines.append(message)
    return "; ".join(lines)
