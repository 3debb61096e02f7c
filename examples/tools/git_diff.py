"""Show the diff between two revisions of a git repository: real `git diff`, run on the server.

Its output can be large (a 50 KB diff is common). Served with `branchc serve --result-handlers`, a caller
can add a `result_handler` script to the call: the server runs it on the diff, in a sandbox, and returns only
what the script computes, say `{"files_changed": 3, "insertions": 120, "deletions": 40}`.
"""

import subprocess
from pathlib import Path

from pydantic import BaseModel, Field

from branchc import Context, tool

REVISION = r"^[^-\s][^\s]*$"  # a revision, never an option: git reads nothing starting with "-" from here


class Params(BaseModel):
    repo: str = Field(description="Path of a git repository on the server")
    base: str = Field("HEAD~1", pattern=REVISION, description="The revision to compare from")
    head: str = Field("HEAD", pattern=REVISION, description="The revision to compare to")


git_diff = tool(
    "git_diff",
    description="The unified diff between two revisions of a git repository",
    params=Params,
    annotations={"read_only_hint": True},
)


@git_diff.before
def before(params: Params) -> dict:
    if not Path(params.repo).is_dir():
        raise ValueError(f"repo {params.repo!r}: no such folder on the server")
    command = ["git", "-C", params.repo, "diff", "--no-color", "--no-ext-diff", params.base, params.head, "--"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise ValueError(f"git diff {params.base} {params.head} failed: {done.stderr.strip()}")
    return {"diff": done.stdout}


@git_diff.client
def client(handoff: dict, ctx: Context):
    yield ctx.log("info", f"{len(handoff['diff'])} characters of diff")
    return handoff["diff"]
