"""An MCP client process that starts calls and never answers them, for a test to kill it
(tests/test_client_gone.py). The real SDK client, in the era given:

    python abandoning_client.py TARGET MODE TOOL ARGUMENTS COUNT ASKED

TARGET is the server's URL, or a tools path to serve over stdio (`branchc serve` as this
process's child). COUNT calls start at once, each on a session of its own. Each sample or
elicitation that arrives appends a line to the file ASKED and then waits forever.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import anyio
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPDeprecationWarning

warnings.simplefilter("ignore", MCPDeprecationWarning)
target, mode, name, arguments, count, asked = sys.argv[1:7]


async def stall(ctx, params):
    with open(asked, "a") as out:
        out.write("asked\n")
    await anyio.sleep_forever()


async def call() -> None:
    server = target
    if not target.startswith("http"):
        server = StdioServerParameters(
            command=sys.executable, args=["-m", "branchc", "serve", target], env=dict(os.environ)
        )
    options = {"sampling_callback": stall, "elicitation_callback": stall, "log_level": "info"}  # logs wanted
    async with Client(server, mode=mode, **options) as client:
        result = await client.call_tool(name, json.loads(arguments))
        print("unexpected result:", result, flush=True)


async def main() -> None:
    async with anyio.create_task_group() as group:
        for _ in range(int(count)):
            group.start_soon(call)


anyio.run(main)
