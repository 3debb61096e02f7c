"""Who may call `branchc serve --http`: its settings, its token verifiers, and what it refuses off loopback.

Real servers in subprocesses, real HTTP on loopback, the real MCP client with a bearer token:
- `ServeSettings`: every flag is a `BRANCHC_*` variable too, and a bad value names both;
- `--auth-tokens FILE`: 401 with `WWW-Authenticate` without a token or with a wrong one, tools with the
  right one; a file others may read is refused; SIGHUP reads it again;
- `--auth-jwks`: JWTs of a JWKS served on loopback, with `exp`, `nbf`, `iss`, `aud`, the signature and
  the algorithm checked, a new key found by fetching the JWKS again; the protected-resource metadata;
- off loopback: no start without auth unless `--allow-anonymous` (which warns), no start on every address
  without `--allowed-hosts`, and a foreign Host or Origin refused.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jwt
import mcp.types as types
import pytest
from _bridge_support import TOOLS, Scripted, free_port, listening
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError as McpError

from branchc.bridge.auth import JwtVerifier
from branchc.bridge.settings import ServeSettings, SettingsError

TOOL = TOOLS / "pick_card.py"
ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef"


def serve_command(port: int, *args: str, host: str = "127.0.0.1") -> list[str]:
    return [sys.executable, "-m", "branchc", "serve", str(TOOL), "--http", f"{host}:{port}", *args]


@contextlib.contextmanager
def serving(*args: str, host: str = "127.0.0.1", env: dict[str, str] | None = None) -> Iterator[tuple[str, Any]]:
    port = free_port()
    with listening(serve_command(port, *args, host=host), port, env) as process:
        yield f"http://127.0.0.1:{port}", process


def refused_start(*args: str, host: str = "127.0.0.1", env: dict[str, str] | None = None) -> str:
    """The one error line of a server that must not start."""
    done = subprocess.run(
        serve_command(free_port(), *args, host=host),
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done.stderr


def tokens_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "tokens"
    path.write_text(text)
    path.chmod(mode)
    return path


async def tool_names(url: str, token: str | None) -> list[str]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    transport = streamable_http_client(f"{url}/mcp", http_client=create_mcp_http_client(headers=headers))
    async with Client(transport, mode="legacy") as client:
        return [tool.name for tool in (await client.list_tools()).tools]


def post(url: str, token: str | None = None, **headers: str) -> httpx2.Response:
    """An initialize request, as any client's first."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    sent = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json", **headers}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    return httpx2.post(f"{url}/mcp", json=body, headers=sent, timeout=30)


# -- settings ------------------------------------------------------------------------------------------


def test_flags_and_variables_alike(monkeypatch):
    monkeypatch.setenv("BRANCHC_STATE_TTL", "60")
    monkeypatch.setenv("BRANCHC_ALLOWED_HOSTS", "mcp.example.com, 10.0.0.5:8000")
    settings = ServeSettings.load(guided=True)
    assert (settings.state_ttl, settings.guided) == (60, True)
    assert settings.allowed_hosts == ["mcp.example.com", "10.0.0.5:8000"]
    assert ServeSettings.load(state_ttl=5).state_ttl == 5  # given beats the environment
    monkeypatch.setenv("BRANCHC_STATE_TTL", "soon")
    with pytest.raises(SettingsError, match=r"--state-ttl \(BRANCHC_STATE_TTL\): Input should be a valid number"):
        ServeSettings.load()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--state-ttl", "-1"], "--state-ttl (BRANCHC_STATE_TTL): Input should be greater than 0"),
        (["--sampling", "provider"], "--sampling provider needs --provider-url and --provider-model"),
        (["--auth-jwks", "keys.json"], "--auth-jwks, --auth-issuer and --auth-audience go together"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_flag(args, expected):
    assert expected in refused_start(*args)


def test_a_variable_serves_as_its_flag(tmp_path):
    """`BRANCHC_HTTP=HOST:PORT` and no --http: the server listens there."""
    port = free_port()
    command = [sys.executable, "-m", "branchc", "serve", str(TOOL)]
    with listening(command, port, {"BRANCHC_HTTP": f"127.0.0.1:{port}"}):
        assert "pick_card" in anyio.run(tool_names, f"http://127.0.0.1:{port}", None)


# -- a token file ------------------------------------------------------------------------------------------


def test_tokens_authenticate_and_nothing_else_does(tmp_path):
    path = tokens_file(tmp_path, f"# who may call\nalice {ALICE}\n\nbob {BOB}\n")
    with serving("--auth-tokens", str(path)) as (url, _):
        for token in (None, "wrong-token-0123456789", ALICE[:-1], ALICE + "x"):
            response = post(url, token)
            assert response.status_code == 401, (token, response.status_code)
            assert response.headers["www-authenticate"].startswith("Bearer"), response.headers
        assert post(url, ALICE).status_code == 200
        assert anyio.run(tool_names, url, BOB) == ["pick_card"]


def test_a_token_file_others_may_read_is_refused(tmp_path):
    path = tokens_file(tmp_path, f"alice {ALICE}\n", mode=0o644)
    message = refused_start("--auth-tokens", str(path))
    assert "others may read it (mode -rw-r--r--)" in message and f"chmod 600 {path}" in message


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("alice\n", ":1: expected `PRINCIPAL TOKEN`, two words"),
        ("alice short\n", ":1: the token is shorter than 16 characters"),
        (f"alice {ALICE}\nbob {ALICE}\n", ":2: this token is given twice"),
        ("# nobody\n", "it names no principal"),
    ],
)
def test_a_bad_token_file_names_its_line(tmp_path, text, problem):
    path = tokens_file(tmp_path, text)
    assert problem in refused_start("--auth-tokens", str(path))


def test_sighup_reads_the_token_file_again(tmp_path):
    path = tokens_file(tmp_path, f"alice {ALICE}\n")
    with serving("--auth-tokens", str(path)) as (url, process):
        assert post(url, ALICE).status_code == 200
        assert post(url, BOB).status_code == 401
        path.write_text(f"bob {BOB}\n")
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while post(url, BOB).status_code != 200:
            assert time.monotonic() < deadline, "SIGHUP did not read the file again"
            time.sleep(0.1)
        assert post(url, ALICE).status_code == 401  # alice is gone
        path.chmod(0o644)  # a file that cannot be used keeps the tokens read before
        process.send_signal(signal.SIGHUP)
        time.sleep(1)
        assert post(url, BOB).status_code == 200
        assert process.poll() is None


# -- JWTs -------------------------------------------------------------------------------------------------

ISSUER = "https://auth.example.test"
AUDIENCE = "https://tools.example.test/mcp"


class Jwks:
    """An authorization server's keys, served at http://127.0.0.1:PORT/jwks.json; `rotate()` adds a key."""

    def __init__(self) -> None:
        self.keys = [rsa.generate_private_key(public_exponent=65537, key_size=2048)]
        self.fetches = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/jwks.json"

    def document(self) -> dict[str, Any]:
        out = []
        for index, key in enumerate(self.keys):
            public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
            out.append({**public, "kid": f"k{index}", "alg": "RS256", "use": "sig"})
        return {"keys": out}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        jwks = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                jwks.fetches += 1
                body = json.dumps(jwks.document()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler

    def token(self, key: int = 0, kid: str | None = None, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "carol", "exp": now + 300, "nbf": now - 5, **claims}
        body = {name: value for name, value in body.items() if value is not None}
        return jwt.encode(body, self.keys[key], algorithm="RS256", headers={"kid": kid or f"k{key}"})

    def rotate(self) -> int:
        self.keys.append(rsa.generate_private_key(public_exponent=65537, key_size=2048))
        return len(self.keys) - 1

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def jwks() -> Iterator[Jwks]:
    keys = Jwks()
    try:
        yield keys
    finally:
        keys.close()


def hs256(claims: dict[str, Any], secret: bytes) -> str:
    """A token "signed" HS256 with `secret` (the issuer's public key, in the algorithm-confusion attack),
    made by hand: PyJWT itself refuses to use an asymmetric key as an HMAC secret."""

    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = part(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k0"}).encode())
    body = part(json.dumps(claims).encode())
    mac = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{part(mac)}"


def jwt_args(jwks_source: str) -> list[str]:
    return ["--auth-jwks", jwks_source, "--auth-issuer", ISSUER, "--auth-audience", AUDIENCE]


def test_jwts_are_checked_against_the_issuers_keys(jwks):
    now = int(time.time())
    with serving(*jwt_args(jwks.url)) as (url, _):
        assert post(url, jwks.token()).status_code == 200
        assert anyio.run(tool_names, url, jwks.token()) == ["pick_card"]
        public_pem = jwks.keys[0].public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
        forged_hs256 = hs256({"iss": ISSUER, "aud": AUDIENCE, "sub": "carol", "exp": now + 300}, public_pem)
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        refused = {
            "expired": jwks.token(exp=now - 60),
            "not yet valid": jwks.token(nbf=now + 600),
            "another issuer": jwks.token(iss="https://evil.example.test"),
            "another audience": jwks.token(aud="https://other.example.test/mcp"),
            "no exp": jwks.token(exp=None),
            "no sub": jwks.token(sub=None),
            "HS256 keyed with the public key": forged_hs256,
            "signed by another key": jwt.encode(
                {"iss": ISSUER, "aud": AUDIENCE, "sub": "carol", "exp": now + 300}, other, "RS256", {"kid": "k0"}
            ),
            "alg none": jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "sub": "carol", "exp": now + 300}, None, "none"),
        }
        for why, token in refused.items():
            assert post(url, token).status_code == 401, why


def test_a_new_key_of_the_issuer_is_fetched_at_most_once_a_cooldown(jwks):
    verifier = JwtVerifier(jwks.url, ISSUER, AUDIENCE, refresh_cooldown=1)

    async def subject(token: str) -> str | None:
        found = await verifier.verify_token(token)
        return found.subject if found is not None else None

    assert anyio.run(subject, jwks.token()) == "carol"
    new = jwks.rotate()
    fetched = jwks.fetches
    assert anyio.run(subject, jwks.token(key=new, sub="dave")) is None  # within the cooldown: not fetched
    assert jwks.fetches == fetched
    time.sleep(1.2)
    assert anyio.run(subject, jwks.token(key=new, sub="dave")) == "dave"  # an unknown kid fetched the keys again
    assert jwks.fetches == fetched + 1
    assert anyio.run(subject, jwks.token(key=new, kid="made-up")) is None


def test_a_jwks_file_and_the_protected_resource_metadata(jwks, tmp_path):
    keys = tmp_path / "jwks.json"
    keys.write_text(json.dumps(jwks.document()))
    with serving(*jwt_args(str(keys))) as (url, _):
        assert post(url, jwks.token()).status_code == 200
        refused = post(url)
        assert refused.status_code == 401
        challenge = refused.headers["www-authenticate"]
        assert "resource_metadata=" in challenge, challenge
        metadata_url = challenge.split('resource_metadata="', 1)[1].split('"', 1)[0]
        assert metadata_url.startswith(url)
        metadata = httpx2.get(metadata_url, timeout=10).json()
        assert metadata["resource"] == f"{url}/mcp", metadata
        assert [server.rstrip("/") for server in metadata["authorization_servers"]] == [ISSUER], metadata


# -- off loopback -----------------------------------------------------------------------------------------


def test_off_loopback_it_needs_auth_or_says_it_serves_anyone(tmp_path):
    port = free_port()
    message = refused_start("--allowed-hosts", f"127.0.0.1:{port}", host="0.0.0.0")
    assert "anyone who can reach this address could call every tool" in message
    assert "--auth-tokens FILE" in message and "--allow-anonymous" in message


def test_every_address_needs_the_allowed_hosts():
    message = refused_start("--allow-anonymous", host="0.0.0.0")
    assert "listens on every address: name the hosts clients reach it by with --allowed-hosts" in message


def test_a_foreign_host_or_origin_is_refused_wherever_it_binds(tmp_path):
    port = free_port()
    path = tokens_file(tmp_path, f"alice {ALICE}\n")
    command = serve_command(port, "--auth-tokens", str(path), "--allowed-hosts", f"127.0.0.1:{port}", host="0.0.0.0")
    with listening(command, port) as process:
        url = f"http://127.0.0.1:{port}"
        assert post(url, ALICE).status_code == 200
        assert post(url, ALICE, Host="evil.example").status_code == 421
        assert post(url, ALICE, Origin="http://evil.example").status_code == 403
        assert post(url, ALICE, Origin=f"http://127.0.0.1:{port}").status_code == 200
        assert process.poll() is None


def test_allow_anonymous_warns(tmp_path):
    port = free_port()
    command = serve_command(port, "--allow-anonymous", "--allowed-hosts", f"127.0.0.1:{port}", host="0.0.0.0")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        lines = []
        while not any("serving" in line for line in lines):
            assert time.monotonic() < deadline and process.poll() is None, lines
            lines.append(process.stderr.readline())
        warning = next(line for line in lines if "warning" in line)
        assert "no authentication (--allow-anonymous)" in warning
        while True:  # the line comes before the server listens
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        assert post(f"http://127.0.0.1:{port}").status_code == 200
    finally:
        process.kill()
        process.wait()
        process.stderr.close()


# -- what one client can hold -----------------------------------------------------------------------------


def read_all(sock: socket.socket, seconds: float) -> bytes:
    """What the server sends until it closes the connection (b"" at once if it does), within `seconds`."""
    sock.settimeout(seconds)
    out = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            out += chunk
    return out


def test_a_request_that_trickles_in_is_cut_off_and_others_are_served():
    with serving("--request-timeout", "1") as (url, process):
        port = int(url.rsplit(":", 1)[1])
        head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        silent = socket.create_connection(("127.0.0.1", port))  # opens, sends nothing
        half = socket.create_connection(("127.0.0.1", port))  # half of its headers, then nothing
        half.sendall(head.encode())
        trickle = socket.create_connection(("127.0.0.1", port))  # a byte at a time, for ever
        body = socket.create_connection(("127.0.0.1", port))  # whole headers, a body that never ends
        body.sendall(f"{head}Content-Length: 1000\r\n\r\n{{".encode())
        start = time.monotonic()
        cut = None
        with contextlib.suppress(OSError):  # a byte every 50 ms, until the server cuts the connection
            for byte in (f"{head}X-Slow: ".encode() + b"x" * 400)[:400]:
                trickle.sendall(bytes([byte]))
                time.sleep(0.05)
            read_all(trickle, 10)
        cut = time.monotonic() - start
        assert cut < 10, "the trickling client was never cut off"
        trickle.close()
        assert post(url).status_code == 200  # meanwhile, a client that sends its request is served
        for sock in (silent, half, body):
            answer = read_all(sock, 10)
            assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer[:200]
            sock.close()
        assert time.monotonic() - start < 15
        assert process.poll() is None


def test_past_max_connections_requests_get_503():
    with serving("--max-connections", "2", "--request-timeout", "20") as (url, _):
        port = int(url.rsplit(":", 1)[1])
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
        for sock in held:
            sock.sendall(b"POST /mcp HTTP/1.1\r\n")
        time.sleep(0.5)
        try:
            assert post(url).status_code == 503
        finally:
            for sock in held:
                sock.close()
        deadline = time.monotonic() + 10
        while post(url).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)


# -- a run's request_state belongs to whoever started it --------------------------------------------------

MODERN = {"mode": "2026-07-28", **Scripted({}, []).callbacks()}  # the callbacks declare the capabilities


def modern(url: str, token: str) -> Client:
    transport = streamable_http_client(
        f"{url}/mcp", http_client=create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    )
    return Client(transport, **MODERN)


@pytest.mark.anyio
@pytest.mark.parametrize("store", ["none", "sqlite"])
async def test_another_principal_cannot_continue_a_round(tmp_path, store):
    """Bob holding Alice's request_state gets what a forged one gets; Alice goes on with hers."""
    path = tokens_file(tmp_path, f"alice {ALICE}\nbob {BOB}\n")
    store_args = ["--store", "none"] if store == "none" else ["--store", f"sqlite:///{tmp_path / 'runs.db'}"]
    arguments = {"count": 3, "analyze": False, "seed": 1}
    env = {"BRANCHC_CACHE": str(tmp_path / "cache")}
    with serving("--auth-tokens", str(path), "--state-key", "s" * 40, *store_args, env=env) as (url, _):
        async with modern(url, ALICE) as alice, modern(url, BOB) as bob:
            asked = await alice.session.call_tool("pick_card", arguments, allow_input_required=True)
            assert isinstance(asked, types.InputRequiredResult)
            answers = {
                key: types.ElicitResult(action="accept", content={"card_number": 1}) for key in asked.input_requests
            }
            refusals = []
            for state in (asked.request_state, "v1.forged-state-of-nobody"):
                with pytest.raises(McpError) as refused:
                    await bob.session.call_tool(
                        "pick_card", arguments, input_responses=answers, request_state=state, allow_input_required=True
                    )
                refusals.append(str(refused.value))
            assert refusals[0] == refusals[1] == "Invalid or expired requestState"
            done = await alice.session.call_tool(
                "pick_card",
                arguments,
                input_responses=answers,
                request_state=asked.request_state,
                allow_input_required=True,
            )
            assert isinstance(done, types.CallToolResult) and not done.is_error, done
