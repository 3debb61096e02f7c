"""The console as a Starlette app: its routes, its pages rendered server-side with Jinja2, and its guard.

Routes (relative to where it is mounted: `/` standalone, `/console` in `branchc serve --http --console`):

    GET  /                     the runs (filters: tool, status, owner, age, build)
    GET  /runs/{id}            a run: its graph, where it waits, its live variables, its history, its trace id
    POST /runs/{id}/cancel     end a waiting run, its finally blocks running once, here
    POST /runs/{id}/fork       a new run waiting where this one waited at checkpoint `at`
    GET  /tools, /tools/{name} the tools, and one tool's graph with how many runs wait at each point
    GET|POST /login, POST /logout    a browser's session, with authentication

Every response carries a strict Content-Security-Policy (scripts and styles from the console's own static files
only, no inline script, no frames), and every page escapes what it shows (Jinja2's autoescape): run data is
untrusted. Store reads, graph drawing and a cancel's cleanup run in worker threads, so that a console mounted in
a server never holds up its rounds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

import anyio
import jinja2
from starlette.applications import Starlette
from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..bridge.auth import transport_security
from ..bridge.runs import RunsError, cancel_run, fork_run
from ..store.base import RunRecord, StoreDataError, StoreError
from .access import CSRF_COOKIE, CSRF_FIELD, SESSION_COOKIE, Access, Viewer
from .pages import (
    Console,
    FilterError,
    Filters,
    cancel_refusal,
    load_visible,
    run_page,
    runs_page,
    tool_page,
    tools_page,
)

__all__ = ["CONTENT_SECURITY_POLICY", "console_app"]

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}
MAX_FORM_BYTES = 16 * 1024  # a console form is a token and a number or two
NOTES = {
    "cancelled": "The run is cancelled: its finally blocks ran once, here, and no server continues it.",
    "cleanup-failed": "The run is cancelled, but its cleanup raised an error (see the server's log).",
    "forked": "This run is a fork: it waits where its parent waited at that checkpoint; the parent is untouched.",
    "signed-in": "",
}


class _Guard:
    """Refuses a request whose Host is not the console's (421, as the SDK's transport security does), and gives
    every response the security headers (and pages `Cache-Control: no-store`: they hold run data)."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self.access.host_ok(Headers(scope=scope).get("host")):
            await _headed(PlainTextResponse("Invalid Host header", status_code=421))(scope, receive, send)
            return
        static = "/static/" in scope.get("path", "")

        async def headed(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
                if not static:
                    headers["cache-control"] = "no-store"
            await send(message)

        await self.app(scope, receive, headed)


def _headed(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers[name] = value
    return response


def _json_for_script(data: Any) -> str:
    """JSON to put inside a <script type="application/json">: no `<`, `>` or `&`, so no text ends the element."""
    text = json.dumps(data, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


class _Pages:
    """The console's request handlers."""

    def __init__(self, console: Console, access: Access) -> None:
        self.console = console
        self.access = access
        self.templates = jinja2.Environment(
            loader=jinja2.PackageLoader("branchc.console", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.filters["q"] = lambda text: quote(str(text), safe="")
        self.templates.filters["script_json"] = _json_for_script

    # -- plumbing ---------------------------------------------------------------------------------------------

    @staticmethod
    def base(request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def page(
        self, request: Request, viewer: Viewer | None, template: str, status: int = 200, **context: Any
    ) -> Response:
        """The page `template` as a response; the browser gets a CSRF seed cookie if it has none yet."""
        seed = request.cookies.get(CSRF_COOKIE) or self.access.new_seed()
        html = self.templates.get_template(template).render(
            base=self.base(request),
            viewer=viewer,
            csrf=self.access.csrf_token(seed, viewer),
            authenticates=self.access.authenticates,
            section=context.pop("section", ""),
            **context,
        )
        response = HTMLResponse(html, status_code=status)
        if request.cookies.get(CSRF_COOKIE) != seed:
            self._cookie(request, response, CSRF_COOKIE, seed, max_age=None)
        return response

    def _cookie(self, request: Request, response: Response, name: str, value: str, max_age: int | None) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            path=(self.base(request) or "") + "/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    def error(self, request: Request, viewer: Viewer | None, status: int, title: str, message: str) -> Response:
        return self.page(request, viewer, "error.html", status, title=title, message=message)

    def not_found(self, request: Request, viewer: Viewer | None, what: str) -> Response:
        return self.error(request, viewer, 404, "Not found", what)

    async def who(self, request: Request) -> Viewer | Response:
        """The viewer, or the response that asks them to sign in (a page: to the login form; a script: 401)."""
        viewer = await self.access.viewer(request)
        if viewer is not None:
            return viewer
        if "authorization" in request.headers or request.method != "GET":
            return PlainTextResponse(
                "sign in: send Authorization: Bearer TOKEN (a token this server accepts), or sign in at /login",
                status_code=401,
                headers={"www-authenticate": 'Bearer realm="branchc console"'},
            )
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"{self.base(request)}/login?{urlencode({'next': target})}", status_code=303)

    async def form(self, request: Request) -> dict[str, str] | Response:
        """A POST's form fields, after the checks every POST passes: its Origin, its size and kind."""
        if not self.access.origin_ok(request):
            return PlainTextResponse("cross-site request refused: its Origin is not this console's", status_code=403)
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            return {}  # not a form of the console's: it carries no CSRF token, so it is refused (403)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                return PlainTextResponse(f"a console form is at most {MAX_FORM_BYTES} bytes", status_code=413)
        try:
            fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
        except (UnicodeDecodeError, ValueError):
            return PlainTextResponse("the form is not URL-encoded UTF-8 text", status_code=400)
        return {name: values[0] for name, values in fields.items()}

    def csrf_refused(self, request: Request, fields: dict[str, str], viewer: Viewer | None) -> Response | None:
        if self.access.csrf_ok(request, fields.get(CSRF_FIELD, ""), viewer):
            return None
        return self.error(
            request,
            viewer,
            403,
            "Refused",
            "The form's CSRF token is missing, or is not this session's: reload the page and try again.",
        )

    @staticmethod
    async def io(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await anyio.to_thread.run_sync(lambda: function(*args, **kwargs))

    # -- pages ------------------------------------------------------------------------------------------------

    async def runs(self, request: Request) -> Response:
        viewer = await self.who(request)
        if isinstance(viewer, Response):
            return viewer
        try:
            filters = Filters.parse(request.query_params)
        except FilterError as error:
            return self.error(request, viewer, 400, "Bad filter", str(error))
        data = await self.io(runs_page, self.console, viewer, filters)
        return self.page(request, viewer, "runs.html", section="runs", **data)

    async def run(self, request: Request) -> Response:
        viewer = await self.who(request)
        if isinstance(viewer, Response):
            return viewer
        return await self._run(request, viewer, request.path_params["run_id"])

    async def _run(self, request: Request, viewer: Viewer, run_id: str, status: int = 200, error: str = "") -> Response:
        values = request.query_params.get("values") == "1"
        try:
            data = await self.io(run_page, self.console, viewer, run_id, values=values)
        except StoreDataError as damaged:  # an operator's look at a damaged record: say what the store says
            return self.error(request, viewer, 500, "Damaged run", str(damaged))
        if data is None:
            return self._no_run(request, viewer, run_id)
        note = NOTES.get(request.query_params.get("done", ""), "")
        graph = data["graph"]
        return self.page(
            request,
            viewer,
            "run.html",
            status,
            section="runs",
            note=note,
            error=error,
            states_json=graph.details,
            **data,
        )

    def _no_run(self, request: Request, viewer: Viewer, run_id: str) -> Response:
        # the same for a run of someone else as for one that does not exist: a handle opens only for its owner
        return self.not_found(
            request,
            viewer,
            f"No run {run_id[:200]!r} here: it never existed, it has ended and expired, or it is not yours.",
        )

    async def tools(self, request: Request) -> Response:
        viewer = await self.who(request)
        if isinstance(viewer, Response):
            return viewer
        data = await self.io(tools_page, self.console, viewer)
        return self.page(request, viewer, "tools.html", section="tools", **data)

    async def tool(self, request: Request) -> Response:
        viewer = await self.who(request)
        if isinstance(viewer, Response):
            return viewer
        name = request.path_params["name"]
        data = await self.io(tool_page, self.console, viewer, name)
        if data is None:
            return self.not_found(
                request, viewer, f"No tool {name[:200]!r} is served here, and none of your runs is of it."
            )
        return self.page(request, viewer, "tool.html", section="tools", states_json=data["graph"].details, **data)

    # -- actions ----------------------------------------------------------------------------------------------

    async def _action(self, request: Request) -> tuple[Viewer, dict[str, str], RunRecord] | Response:
        """The viewer, form and run of a POST on a run that passed every check (Origin, CSRF, who, whose)."""
        fields = await self.form(request)
        if isinstance(fields, Response):
            return fields
        viewer = await self.access.viewer(request)
        refused = self.csrf_refused(request, fields, viewer)
        if refused is not None:
            return refused
        if viewer is None:
            return await self.who(request)  # type: ignore[return-value]  # always a Response here
        run_id = request.path_params["run_id"]
        record = await self.io(load_visible, self.console, viewer, run_id)
        if record is None:
            return self._no_run(request, viewer, run_id)
        return viewer, fields, record

    def _to_run(self, request: Request, run_id: str, note: str) -> Response:
        return RedirectResponse(f"{self.base(request)}/runs/{quote(run_id, safe='')}?done={note}", status_code=303)

    async def cancel(self, request: Request) -> Response:
        checked = await self._action(request)
        if isinstance(checked, Response):
            return checked
        viewer, _, record = checked
        refusal = cancel_refusal(self.console, record)
        if refusal:
            return await self._run(request, viewer, record.run_id, 409, f"Not cancelled: {refusal}.")
        try:
            done = await self.io(cancel_run, self.console.store, record.run_id, self.console.tools or {})
        except (RunsError, StoreError) as error:
            return await self._run(request, viewer, record.run_id, 409, f"Not cancelled: {error}")
        return self._to_run(request, record.run_id, "cleanup-failed" if done.cleanup_error is not None else "cancelled")

    async def fork(self, request: Request) -> Response:
        checked = await self._action(request)
        if isinstance(checked, Response):
            return checked
        viewer, fields, record = checked
        at = fields.get("at", "").strip()
        if not at.isdigit() or len(at) > 9:
            why = f"at={at[:40]!r}: give a checkpoint number K, as the history lists"
            return self.error(request, viewer, 400, "Bad checkpoint", why)
        full = await self.io(self._over_cap, viewer, record.owner)
        if full:
            return await self._run(request, viewer, record.run_id, 409, f"Not forked: {full}")
        try:
            forked = await self.io(fork_run, self.console.store, record.run_id, int(at))
        except (RunsError, StoreError) as error:
            return await self._run(request, viewer, record.run_id, 409, f"Not forked: {error}")
        return self._to_run(request, forked.run_id, "forked")

    def _over_cap(self, viewer: Viewer, owner: str | None) -> str:
        """Why the owner may not have one more waiting run ("" when they may): a fork counts toward their caps, as a
        run they started would (`--principal-max-runs`, `--principal-max-mb`). Operators are not held to them."""
        if viewer.operator:
            return ""
        settings = self.console.settings
        usage = self.console.store.usage("waiting", "running", owner=owner)
        if usage.count >= settings.principal_max_runs:
            return (
                f"you have {usage.count} runs waiting, the most one principal may have (--principal-max-runs "
                f"{settings.principal_max_runs}); end some first"
            )
        if usage.bytes >= settings.principal_max_mb * 2**20:
            return (
                f"your waiting runs hold {usage.bytes / 2**20:.1f} MiB, the most one principal may (--principal-max-mb)"
            )
        return ""

    # -- signing in -------------------------------------------------------------------------------------------

    def _next(self, request: Request, target: str) -> str:
        """Where to go after signing in: a page of this console, never another site."""
        base = self.base(request)
        if target.startswith(f"{base}/") and not target.startswith("//") and "\\" not in target:
            return target
        return f"{base}/"

    async def login(self, request: Request) -> Response:
        if not self.access.authenticates:
            return RedirectResponse(f"{self.base(request)}/", 303)
        if request.method == "GET":
            target = self._next(request, request.query_params.get("next", ""))
            return self.page(request, None, "login.html", next=target, error="")
        fields = await self.form(request)
        if isinstance(fields, Response):
            return fields
        refused = self.csrf_refused(request, fields, None)
        if refused is not None:
            return refused
        token = fields.get("token", "").strip()
        target = self._next(request, fields.get("next", ""))
        principal = await self.access.principal(token)
        if principal is None:
            message = "That token is not one this server accepts, or it has expired."
            return self.page(request, None, "login.html", 401, next=target, error=message)
        until = await self.access.expires(token)
        response = RedirectResponse(target, status_code=303)
        self._cookie(request, response, SESSION_COOKIE, self.access.sealed(token, until), int(until - time.time()))
        return response

    async def logout(self, request: Request) -> Response:
        fields = await self.form(request)
        if isinstance(fields, Response):
            return fields
        refused = self.csrf_refused(request, fields, await self.access.viewer(request))
        if refused is not None:
            return refused
        response = RedirectResponse(f"{self.base(request)}/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=(self.base(request) or "") + "/")
        return response


def console_app(console: Console) -> ASGIApp:
    """The console's ASGI app for `console` (pages.Console: the store, keys, settings, tools, verifier)."""
    operators = frozenset(console.settings.operators)
    access = Access(console.keys, console.verifier, operators, transport_security(console.settings))
    pages = _Pages(console, access)
    routes: list[Route | Mount] = [
        Route("/", pages.runs, name="runs"),
        Route("/runs/{run_id}", pages.run, name="run"),
        Route("/runs/{run_id}/cancel", pages.cancel, methods=["POST"], name="cancel"),
        Route("/runs/{run_id}/fork", pages.fork, methods=["POST"], name="fork"),
        Route("/tools", pages.tools, name="tools"),
        Route("/tools/{name}", pages.tool, name="tool"),
        Route("/login", pages.login, methods=["GET", "POST"], name="login"),
        Route("/logout", pages.logout, methods=["POST"], name="logout"),
        Mount("/static", StaticFiles(packages=[("branchc.console", "static")]), name="static"),
    ]
    return _Guard(Starlette(routes=routes), access)
