"""A small OpenAI-compatible chat-completions server on 127.0.0.1, for the provider tests.

    python tests/servers/fake_llm.py PORT LOG

It answers each request with "[fake] <the last message's text>", reports usage, and appends
every request body to LOG (JSON lines). A last message containing "please fail" gets a 500;
one containing "please stall" gets no answer at all.
"""

from __future__ import annotations

import json
import sys

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

LOG = sys.argv[2] if len(sys.argv) > 2 else None


async def completions(request: Request) -> JSONResponse:
    body = await request.json()
    if LOG:
        with open(LOG, "a") as log:
            log.write(json.dumps(body) + "\n")
    last = body["messages"][-1].get("content") or ""
    if "please stall" in last:  # a model that never answers (until the test kills this server)
        await anyio.sleep_forever()
    if "please fail" in last:
        return JSONResponse({"error": {"message": "asked to fail"}}, status_code=500)
    return JSONResponse(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": f"[fake] {last}"}}
            ],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3},
        }
    )


app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
