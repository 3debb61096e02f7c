"""branchc tools beside a server's own: `mount(server, "tools/")` adds them to an existing SDK server.

    from mcp.server.mcpserver import MCPServer
    from branchc.bridge import mount

    mcp = MCPServer("my-server")          # its own tools, prompts and resources as usual
    mount(mcp, "tools/")                  # tool sources (compiled into the cache) or a build folder

Works on `MCPServer` and on the lowlevel `mcp.server.Server`, in both protocol eras. The server's
`tools/list` lists the branchc tools beside its own (before them, on the first page); `tools/call`
runs a branchc tool by name and passes every other call to the server's own handler. A lowlevel
server without a `RequestStateBoundary` gets one (2026-07-28 rounds carry the run in a sealed
`request_state`); `MCPServer` always has one, with a key of its process unless given
`request_state_security=`: give it one when replicas serve alternate rounds.

Served over streamable HTTP by the SDK's own app, wrap the app in `watch_clients`, so a handshake-era
call whose client goes away (killed, or its connection dropped) ends at once (its finally blocks run)
instead of waiting for the session's idle timeout, and an answer over the body limit fails its question:

    import uvicorn
    from branchc.bridge import watch_clients

    uvicorn.run(watch_clients(mcp.streamable_http_app()), host="127.0.0.1", port=8000)

(`mcp.run("streamable-http")` serves the app unwrapped; stdio needs nothing.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import Executor
from pathlib import Path
from types import ModuleType
from typing import Any

import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.request_state import RequestStateBoundary

from ..runtime.limits import Limits
from ..runtime.tool import Tool
from ..store.base import RunStore
from ..store.keys import KeyRing
from .expiry import attach_sweeper
from .guided import RESUME_TOOL
from .loading import ServeLoadError, load_served_tools
from .provider import ChatCompletionsProvider
from .server import Bridge, bridge_for, state_security
from .settings import ServeSettings
from .workflow_tools import WorkflowTools

__all__ = ["mount"]

ToolsArg = str | Path | Tool | ModuleType | Mapping[str, Tool] | Iterable[Tool]


def mount(
    server: Any,
    tools: ToolsArg,
    settings: ServeSettings | None = None,
    *,
    limits: Limits | None = None,
    provider: ChatCompletionsProvider | None = None,
    store: RunStore | None = None,
    executor: Executor | None = None,
    **given: Any,
) -> Bridge:
    """Serve branchc `tools` from `server` (an `MCPServer` or a lowlevel `Server`) beside its own.

    `tools`: a path of tool sources (a file or a folder, compiled into the cache, `$BRANCHC_CACHE`) or of
    a build folder from `branchc compile`; or tools already loaded compiled (a Tool, a list or dict of
    them, a module of a build). `settings` are `branchc serve`'s (`ServeSettings`, by default from the
    environment's `BRANCHC_*`; keywords such as `state_key=` or `guided=` override single ones): `state_key`
    and `state_ttl` seal the 2026-07-28 `request_state` on a lowlevel server that has no boundary yet;
    `sampling`, `guided` and the rest as in `create_server`. `limits`, `provider`, `store` (a RunStore,
    `branchc.store.open_store(url)`: 2026-07-28 rounds checkpointed in it, request_state a short run
    reference, each round exactly once, and guided runs waiting in it) and `executor` (where sub-branch steps
    run) as there too. Authentication is the server's own: give your `MCPServer` `auth=` and
    `token_verifier=` (`branchc.bridge.auth.TokenFileVerifier`, `JwtVerifier`), and runs belong to the
    principal that started them as under `branchc serve`. Returns the Bridge (its `tools`).
    """
    key_given = "state_key" in given or (settings is not None and settings.state_key is not None)
    settings = ServeSettings.load(**given) if settings is None else settings.with_changes(**given)
    state_key, state_ttl, guided = settings.state_key_text, settings.state_ttl, settings.guided
    if provider is None and settings.sampling != "client":
        provider = settings.provider()
    lowlevel = lowlevel_server(server)
    found = _tools(tools, guided)
    # every refusal comes before the server is touched: a failed mount leaves it as it was
    sealed = any(isinstance(layer, RequestStateBoundary) for layer in lowlevel.middleware)
    if sealed and key_given:
        raise ValueError(
            "state_key: this server seals request_state already (MCPServer does); give the key to the server "
            "instead: MCPServer(..., request_state_security=RequestStateSecurity(keys=[key]))"
        )
    workflows = WorkflowTools(found)
    if (own := getattr(server, "_tool_manager", None)) is not None:
        names = [*found, *([RESUME_TOOL] if guided else []), *workflows.names]
        if taken := sorted(name for name in names if own.get_tool(name) is not None):
            raise ValueError(f"{', '.join(taken)}: the server has a tool of that name already; rename one")
    if (own_prompts := getattr(server, "_prompt_manager", None)) is not None:
        if taken := sorted(name for name in workflows.workflows if own_prompts.get_prompt(name) is not None):
            raise ValueError(f"{', '.join(taken)}: the server has a prompt of that name already; rename one")
    bridge = bridge_for(
        found, settings, name=lowlevel.name, limits=limits, provider=provider, store=store, executor=executor
    )
    ours = set(bridge.tools) | ({RESUME_TOOL} if guided else set()) | bridge.workflows.names
    _beside(lowlevel, "tools", "tools/call", types.CallToolRequestParams, ours, bridge.list_tools, bridge.call_tool)
    if bridge.workflows:
        names = {prompt.name for prompt in bridge.workflows.prompts()}
        get = types.GetPromptRequestParams
        _beside(lowlevel, "prompts", "prompts/get", get, names, bridge.list_prompts, bridge.get_prompt)
    own_schema = lowlevel.get_tool_input_schema

    def input_schema(name: str) -> Mapping[str, Any] | None:
        if name in bridge.tools:
            return bridge.tools[name].input_schema
        return own_schema(name) if own_schema is not None else None

    if own_schema is not None:  # without one the SDK asks tools/list, which lists ours too
        lowlevel.get_tool_input_schema = input_schema
    if not sealed:
        keys = KeyRing.parse(state_key) if state_key else None
        lowlevel.middleware.append(
            RequestStateBoundary(state_security(keys, state_ttl), default_audience=lowlevel.name)
        )
    attach_sweeper(server, bridge)  # expired waiting runs are ended, once, while the server runs (expiry.py)
    return bridge


def _beside(
    lowlevel: Server, kind: str, use_method: str, params_type: type, ours: set[str], list_ours: Any, use_ours: Any
) -> None:
    """branchc's `kind` (tools or prompts) beside the server's own: `KIND/list` lists ours first, on the
    first page, and `use_method` (tools/call, prompts/get) of a name in `ours` is ours, of any other theirs."""
    own_list = lowlevel.get_request_handler(f"{kind}/list")
    own_use = lowlevel.get_request_handler(use_method)

    async def listed(ctx: ServerRequestContext, params: types.PaginatedRequestParams | None):
        mine = await list_ours(ctx, params)
        if own_list is None:
            return mine
        theirs = await own_list.handler(ctx, params)
        if params is not None and params.cursor is not None:
            return theirs  # a later page of the server's own: branchc's are on the first
        return theirs.model_copy(update={kind: [*getattr(mine, kind), *getattr(theirs, kind)]})

    async def used(ctx: ServerRequestContext, params: Any):
        if params.name in ours or own_use is None:
            return await use_ours(ctx, params)
        return await own_use.handler(ctx, params)

    lowlevel.add_request_handler(f"{kind}/list", types.PaginatedRequestParams, listed)
    lowlevel.add_request_handler(use_method, params_type, used)


def lowlevel_server(server: Any, what: str = "mount() adds branchc tools to") -> Server:
    """The lowlevel `Server` of an `MCPServer`, or `server` itself; TypeError naming `what` otherwise."""
    if isinstance(server, Server):
        return server
    inner = getattr(server, "_lowlevel_server", None)  # MCPServer
    if isinstance(inner, Server):
        return inner
    raise TypeError(f"{what} an mcp SDK server: an MCPServer or a mcp.server.Server, not {type(server).__name__}")


def _tools(tools: ToolsArg, guided: bool) -> dict[str, Tool]:
    if isinstance(tools, (str, Path)):
        return load_served_tools(tools, guided=guided)
    if isinstance(tools, Tool):
        listed: list[Any] = [tools]
    elif isinstance(tools, ModuleType):
        listed = [value for value in vars(tools).values() if isinstance(value, Tool)]
    elif isinstance(tools, Mapping):
        listed = list(tools.values())
    else:
        listed = list(tools)
    found: dict[str, Tool] = {}
    for tool in listed:
        if not isinstance(tool, Tool):
            raise TypeError(f"mount(): {tool!r} is not a branchc tool; give tools, or the path of their sources")
        if not getattr(tool.client_fn, "__branchc_compiled__", False):
            raise ServeLoadError(
                f"tool {tool.name!r} is not compiled, and served tools run compiled (so a run behaves the same in "
                f"both protocol eras); give mount() the path of its sources or of a build folder instead"
            )
        if tool.name in found:
            raise ServeLoadError(f"two tools are named {tool.name!r}; rename one")
        found[tool.name] = tool
    if not found:
        raise ServeLoadError("mount(): no tools given")
    return found
