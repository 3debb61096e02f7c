"""Runs moving to a new build of their tool (continuation/snapshots.py `_moved`), against the edit corpus.

For every edit of tests/test_compat.py and every place a run of the base tool can wait (each sample and
elicitation, in the client and in its branch), the run is brought there on the old code, saved, and
loaded where only the new code is. Where every point it waits at is unchanged or compatible, the run goes
on there and ends exactly as a fresh run of the new code fed the same answers (the differential: CPython
runs both). Where one is not, loading it is refused, naming that point, and nothing of it runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from _bridge_support import KEYS, http_server
from _runtime_support import entries
from mcp import Client
from test_compat import BASE, EDITS, manifest

from branchc.runtime.errors import ToolDefinitionError
from branchc.runtime.machine import Machine
from branchc.runtime.runstate import RunStateError, dump_run, load_run
from branchc.splitter import load_source
from branchc.splitter.compat import compare
from branchc.store import open_store

MODULE = "plan_deployed"  # both builds load under one name, as a deploy replaces the module
STOPS = 8  # the places a run of BASE waits: 3 samples, 2 in the branch, 2 forms, 1 last sample
#: Edits after which a run saved from this place on ends as the old code's run, not as a fresh run of the new code:
#: what the old code did before the place differs from what the new code would do, and a moved run keeps what it
#: has (the loop it is in, with its iterator; the draft the removed branch wrote); what follows is the same.
ENDS_AS_OLD_FROM = {
    "change a loop's range": 0,
    "remove the branch": 3,
    "remove the resumable function and its branch": 3,
}


def answer(request: Any) -> Any:
    if request.kind == "sample":
        return f"reply {request.number}"
    return {"action": "decline"} if request.number % 2 else {"action": "accept", "content": {"pick": request.number}}


def drive(module: Any, stop: int | None = None, text: str | None = None) -> Any:
    """A run of the module's tool, answered by `answer`: its text when it waits for the `stop`-th time,
    else (ok, result) at its end; `text`: a saved run to go on from instead of a new run."""
    tool = module.plan
    if text is None:
        handoff, machine = {"topic": "t"}, Machine(tool.name, "call-1", tool.limits)
        machine.start(tool.client_fn, handoff, tool.client_fn.__qualname__)
        machine.advance()
    else:
        handoff, machine = load_run(text)
    waited = 0
    while not machine.done:
        machine.take_outbox()
        if waited == stop:
            saved = dump_run(handoff, machine)
            machine.release()
            return saved
        for request in list(machine.pending):
            machine.answer(request.key, answer(request))
        machine.advance()
        waited += 1
    return machine.ok, machine.result


def waits_at(text: str) -> list[tuple[str, str]]:
    """(function, point) of every generator the saved run holds suspended."""
    found: list[tuple[str, str]] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if value.get("t") == "gen" and "point" in value:
                found.append((value["fn"].split(":", 1)[1], value["point"]))
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(json.loads(text))
    return found


@pytest.fixture(scope="module")
def saved() -> tuple[list[str], Any]:
    """The base tool's run saved at each place it waits, and its own end."""
    old = load_source(BASE, MODULE, f"{MODULE}.py")
    texts = [drive(old, stop) for stop in range(STOPS)]
    assert all(isinstance(text, str) for text in texts) and drive(old, STOPS) == drive(old)
    return texts, drive(old)


def test_a_run_waits_at_every_point_of_the_base_where_a_run_can_wait(saved) -> None:
    texts, _ = saved
    points = {point for text in texts for point in waits_at(text)}
    assert points == {
        ("client", "for/sample:reply"),
        ("client", "if:then/branch:draft"),
        ("draft", "sample:outline"),
        ("draft", "sample:text"),
        ("client", "while/elicit:pick"),
        ("client", "try:body/sample:final"),
    }


@pytest.mark.parametrize(("name", "source"), [(e[0], e[1]) for e in EDITS], ids=[e[0] for e in EDITS])
def test_a_run_moves_to_the_new_build_exactly_where_its_points_allow(saved, name, source) -> None:
    texts, old_end = saved
    verdicts = {(line.function, line.point): line.verdict for line in compare(manifest(BASE), manifest(source))}
    new = load_source(source, MODULE, f"{MODULE}.py")
    try:
        fresh = drive(new)
        assert fresh[0], fresh
        moved = refused = 0
        for stop, text in enumerate(texts):
            blocking = [at for at in waits_at(text) if verdicts[at] in ("needs a migration", "removed")]
            if blocking:
                with pytest.raises(RunStateError) as caught:
                    drive(new, text=text)
                assert any(f"point {point!r}" in str(caught.value) for _, point in blocking), (stop, caught.value)
                refused += 1
                continue
            end = drive(new, text=text)
            if stop >= ENDS_AS_OLD_FROM.get(name, STOPS):
                assert end == old_end, (stop, end)
            else:
                assert end == fresh, (stop, end)
            moved += 1
        assert moved + refused == STOPS
    finally:
        load_source(BASE, MODULE, f"{MODULE}.py")  # the next edit's old build


def test_a_run_refused_by_the_new_build_still_continues_on_the_old(saved) -> None:
    texts, old_end = saved
    source = dict((e[0], e[1]) for e in EDITS)["rename a local carried across yields"]
    load_source(source, MODULE, f"{MODULE}.py")
    with pytest.raises(RunStateError) as caught:
        drive(load_source(source, MODULE, f"{MODULE}.py"), text=texts[4])
    text = str(caught.value)
    assert "waits at point" in text and "no longer carries notes" in text and "it carries items" in text
    assert drive(load_source(BASE, MODULE, f"{MODULE}.py"), text=texts[4]) == old_end


def test_a_new_parameter_with_a_literal_default_is_given_its_default(saved) -> None:
    texts, _ = saved
    source = dict((e[0], e[1]) for e in EDITS)["add a parameter with a default"]
    new = load_source(source, MODULE, f"{MODULE}.py")
    try:
        _, machine = load_run(texts[3])  # the branch waits at draft's first sample: tone is live there
        (generator,) = [
            b.generator for b in machine.branches.values() if b.generator.gi_code.co_qualname.endswith("draft")
        ]
        assert generator.gi_frame.f_locals["tone"] == "plain"
        machine.release()
        assert drive(new, text=texts[3]) == drive(new)
    finally:
        load_source(BASE, MODULE, f"{MODULE}.py")


def test_a_changed_form_is_refused_even_where_the_function_is_the_same(saved) -> None:
    texts, _ = saved
    source = dict((e[0], e[1]) for e in EDITS)["change the elicitation's schema"]
    new = load_source(source, MODULE, f"{MODULE}.py")
    try:
        assert (
            new.client.__branchc_meta__.hash == load_source(BASE, "plan_base_only", "b.py").client.__branchc_meta__.hash
        )
        with pytest.raises(RunStateError) as caught:
            drive(new, text=texts[5])  # waits on the form
        assert "point 'while/elicit:pick'" in str(caught.value) and "the form it asked" in str(caught.value)
        assert drive(new, text=texts[7]) == drive(new)  # past the form: it goes on
    finally:
        load_source(BASE, MODULE, f"{MODULE}.py")


# -- a deploy, as a client sees it ---------------------------------------------------------------------------


def deployable(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The base tool's source in a folder of its own (a deploy rewrites it there), and the servers' environment."""
    folder = tmp_path / "tools"
    folder.mkdir()
    source = folder / "plan_tool.py"
    source.write_text(BASE)
    return source, {"BRANCHC_CACHE": str(tmp_path / "cache"), "BRANCHC_STATE_DIR": str(tmp_path / "state")}


async def _sample(ctx: Any = None, params: Any = None) -> types.CreateMessageResult:
    return types.CreateMessageResult(role="assistant", model="m", content=types.TextContent(type="text", text="x"))


async def _form(ctx: Any = None, params: Any = None) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"pick": 1})


async def _answers(result: types.InputRequiredResult) -> dict[str, Any]:
    """What a client answers to each request of a round: each sample "x", each form {"pick": 1}."""
    return {
        key: await (_sample() if isinstance(request, types.CreateMessageRequest) else _form())
        for key, request in result.input_requests.items()
    }


async def _rounds(url: str, rounds: int, state: str | None = None, responses: dict | None = None) -> Any:
    """Up to `rounds` rounds of a call of `plan` over HTTP in the 2026-07-28 era, from `state` (with `responses`)
    or a new call: the last result, and the answers to it."""
    async with Client(url, mode="2026-07-28", sampling_callback=_sample, elicitation_callback=_form) as client:
        for _ in range(rounds):
            result = await client.session.call_tool(
                "plan", {"topic": "t"}, request_state=state, input_responses=responses, allow_input_required=True
            )
            if not isinstance(result, types.InputRequiredResult):
                return result, None
            state, responses = result.request_state, await _answers(result)
        return result, responses


@pytest.mark.usefixtures("state_key_in_env")
def test_a_deploy_over_http_lets_the_clients_next_round_go_on(tmp_path) -> None:
    """Served with a store; the server is stopped, its source replaced in the same folder (a deploy), and started
    again. The client's next round goes on in the new code where the point allows. Where it does not, the run
    finishes on the build that saved it, kept beside the new one, while new calls run the new code; and once that
    build is no longer kept, the round is refused naming the point (the run waits on), and goes on when code that
    can take it is served again."""
    source, env = deployable(tmp_path)
    store = ("--store", f"sqlite:///{tmp_path / 'runs.db'}")
    compatible = dict((e[0], e[1]) for e in EDITS)["change a sample's prompt"]

    with http_server(source, env, *store) as url:  # two samples of the loop answered; the third asked
        waiting, answers = anyio.run(_rounds, url, 3)
        other, other_answers = anyio.run(_rounds, url, 3)
    assert isinstance(waiting, types.InputRequiredResult) and isinstance(other, types.InputRequiredResult)
    (kept,) = (tmp_path / "cache" / "builds").iterdir()  # the served build, kept by its id
    source.write_text(RENAMED)  # `notes` is `items` now: the point no longer carries what the run holds
    with http_server(source, env, *store) as url:
        done, _ = anyio.run(_rounds, url, 20, waiting.request_state, answers)
        fresh, _ = anyio.run(_rounds, url, 20)
    assert not done.is_error and done.structured_content == {"notes": ["x", "x", "x"], "pick": 1, "final": "x"}
    assert not fresh.is_error and fresh.structured_content == {"items": ["x", "x", "x"], "pick": 1, "final": "x"}

    shutil.rmtree(kept)  # the old build is gone from this machine
    with http_server(source, env, *store) as url:
        refused, _ = anyio.run(_rounds, url, 1, other.request_state, other_answers)
    text = refused.content[0].text
    assert refused.is_error and "waits at point 'for/sample:reply'" in text and "no longer carries notes" in text
    assert f"the build that saved it ({kept.name}) is not kept here" in text
    source.write_text(compatible)
    with http_server(source, env, *store) as url:
        done, _ = anyio.run(_rounds, url, 20, other.request_state, other_answers)
    assert not done.is_error, done
    assert done.structured_content == {"notes": ["x", "x", "x"], "pick": 1, "final": "x"}


# -- migrations ----------------------------------------------------------------------------------------------

MIGRATED = "plan_migrated"  # a module of its own: its migrations are registered for it alone
RENAMED = dict((e[0], e[1]) for e in EDITS)["rename a local carried across yields"]
CLIENT_POINTS = ["for/sample:reply", "if:then/branch:draft", "while/elicit:pick", "try:body/sample:final"]


def with_migration(source: str, body: str, points: list[str] = CLIENT_POINTS, to: str | None = None) -> str:
    """`source` with a migration of the client, `migration(old)` whose body is `body`, for each of `points`."""
    target = "" if to is None else f", to={to!r}"
    lines = [f"@plan.migrate({point!r}{target})" for point in points]
    return source + "\n\n" + "\n".join(lines) + "\ndef migration(old):\n" + textwrap.indent(body, "    ") + "\n"


@pytest.fixture(scope="module")
def saved_for_migrations() -> list[str]:
    old = load_source(BASE, MIGRATED, f"{MIGRATED}.py")
    return [drive(old, stop) for stop in range(STOPS)]


def test_a_migration_moves_runs_a_changed_point_would_strand(saved_for_migrations) -> None:
    new = load_source(with_migration(RENAMED, 'old["items"] = old.pop("notes")\nreturn old'), MIGRATED, "m.py")
    fresh = drive(new)
    for stop, text in enumerate(saved_for_migrations):
        assert drive(new, text=text) == fresh, stop


def test_a_migration_moves_runs_to_a_point_of_another_name(saved_for_migrations) -> None:
    source = dict((e[0], e[1]) for e in EDITS)["rename the variable a sample's reply goes to"]
    migrated = with_migration(source, "return old", ["for/sample:reply"], to="for/sample:answer")
    new = load_source(migrated, MIGRATED, "m.py")
    assert drive(new, text=saved_for_migrations[1]) == drive(new)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("return None", "returned NoneType, not a dict of variables by name"),
        ('return {**old, "evil": 1}', "returned evil, notes, which plan_migrated:client does not keep at point"),
        ('raise KeyError("notes")', "raised KeyError: 'notes'"),
        ('old["items"] = {}\ndel old["notes"]\nreturn old', "cannot put there"),
    ],
)
def test_a_migration_that_fails_refuses_the_run_naming_itself(saved_for_migrations, body, problem) -> None:
    new = load_source(with_migration(RENAMED, body), MIGRATED, "m.py")
    with pytest.raises(RunStateError) as caught:
        drive(new, text=saved_for_migrations[5])  # waits on the form
    text = str(caught.value)
    assert "waits at point 'while/elicit:pick'" in text and "migration migration (plan_migrated:client" in text, text
    assert problem in text, text


def test_a_migration_to_a_point_the_function_lacks_is_refused_when_the_module_loads() -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        load_source(with_migration(RENAMED, "return old", ["while/elicit:pick"], to="nowhere"), "plan_bad", "b.py")
    assert "migrate(..., to='nowhere'): client has no such point; its points are" in str(caught.value)
    assert "while/elicit:pick" in str(caught.value)


def test_a_run_compatible_as_it_is_is_not_migrated(saved_for_migrations) -> None:
    comment = dict((e[0], e[1]) for e in EDITS)["edit a comment"]
    new = load_source(with_migration(comment, 'raise AssertionError("not for this run")'), MIGRATED, "m.py")
    assert drive(new, text=saved_for_migrations[5]) == drive(new)


# -- `branchc runs migrate` -----------------------------------------------------------------------------------


@pytest.mark.usefixtures("state_key_in_env")
def test_runs_migrate_moves_waiting_runs_ahead_of_their_next_round(tmp_path) -> None:
    source, env = deployable(tmp_path)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with http_server(source, env, "--store", url) as served:
        waiting, answers = anyio.run(_rounds, served, 3)
    store = open_store(url, KEYS)
    (before,) = store.list(status="waiting")
    env = {**os.environ, **env}

    def migrate(*options: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "branchc", "runs", "migrate", "--to", str(source), "--store", url, "--json"]
        return subprocess.run([*command, *options], env=env, capture_output=True, text=True, timeout=120)

    source.write_text(RENAMED)  # what the run carries changed, and no migration: it cannot move
    refused = migrate()
    assert refused.returncode == 1, refused.stderr
    (entry,) = json.loads(refused.stdout)
    assert entry["outcome"] == "refused" and "waits at point 'for/sample:reply'" in entry["detail"]
    assert store.load(before.run_id).version == before.version  # left as it was
    source.write_text(dict((e[0], e[1]) for e in EDITS)["change a sample's prompt"])
    dry = migrate("--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert [e["outcome"] for e in json.loads(dry.stdout)] == ["would move"]
    assert store.load(before.run_id).version == before.version
    moved = migrate()
    assert moved.returncode == 0, moved.stderr
    assert [e["outcome"] for e in json.loads(moved.stdout)] == ["moved"]
    after = store.load(before.run_id)
    assert after.version == before.version + 1 and after.meta.code_hash != before.meta.code_hash
    assert after.meta.extra["round"] == before.meta.extra["round"] and after.saved != before.saved
    assert [e["outcome"] for e in json.loads(migrate().stdout)] == ["current"]
    store.close()
    with http_server(source, env, "--store", url) as served:  # the client's next round goes on in the new build
        done, _ = anyio.run(_rounds, served, 20, waiting.request_state, answers)
    assert not done.is_error and done.structured_content == {"notes": ["x", "x", "x"], "pick": 1, "final": "x"}


async def _guided(url: str, rounds: int, shown: dict | None = None) -> Any:
    """Up to `rounds` calls in guided mode (a client that can neither sample nor elicit): the tool, or from the
    waiting run `shown`, `branchc_resume` with each request answered (a sample "x", a form {"pick": 1})."""
    async with Client(url, mode="2026-07-28") as client:
        for _ in range(rounds):
            if shown is None:
                result = await client.session.call_tool("plan", {"topic": "t"})
            else:
                keys = [request["key"] for request in shown["requests"]]
                answers = {key: "x" if key.startswith("sample") else {"pick": 1} for key in keys}
                arguments = {"state_id": shown["state_id"], "answers": answers}
                result = await client.session.call_tool("branchc_resume", arguments)
            shown = result.structured_content or {}
            if shown.get("status") != "waiting_for_answers":
                return result
        return result


@pytest.mark.usefixtures("state_key_in_env")
def test_a_guided_run_goes_on_after_a_deploy(tmp_path) -> None:
    source, env = deployable(tmp_path)
    options = ("--guided", "--store", f"sqlite:///{tmp_path / 'runs.db'}")
    with http_server(source, env, *options) as url:
        waiting = anyio.run(_guided, url, 3)  # two samples of the loop answered
    shown = waiting.structured_content
    assert shown["status"] == "waiting_for_answers", shown
    with http_server(source, env, *options) as url:
        other = anyio.run(_guided, url, 3).structured_content
    (kept,) = (tmp_path / "cache" / "builds").iterdir()
    source.write_text(RENAMED)
    with http_server(source, env, *options) as url:  # it cannot move: it finishes on the build that saved it
        done = anyio.run(_guided, url, 20, shown)
    assert not done.is_error and done.structured_content == {"notes": ["x", "x", "x"], "pick": 1, "final": "x"}
    shutil.rmtree(kept)
    with http_server(source, env, *options) as url:
        refused = anyio.run(_guided, url, 1, other)
    assert refused.is_error and "waits at point 'for/sample:reply'" in refused.content[0].text
    source.write_text(dict((e[0], e[1]) for e in EDITS)["change a sample's prompt"])
    with http_server(source, env, *options) as url:  # the refused run waited on under the same state id
        done = anyio.run(_guided, url, 20, other)
    assert not done.is_error and done.structured_content == {"notes": ["x", "x", "x"], "pick": 1, "final": "x"}


async def _workflow_rounds(url: str, rounds: int, state: str | None = None, responses: dict | None = None) -> Any:
    """Rounds of chain_of_thought over HTTP in the 2026-07-28 era: (the last result, its answers, the messages the
    samples of these rounds ended with). Each sample is answered '["a"]' (one sub-task), the review form as good."""
    asked: list[str] = []
    async with Client(url, mode="2026-07-28", sampling_callback=_sample, elicitation_callback=_form) as client:
        for _ in range(rounds):
            result = await client.session.call_tool(
                "chain_of_thought", {"problem": "p"}, request_state=state, input_responses=responses,
                allow_input_required=True,
            )  # fmt: skip
            if not isinstance(result, types.InputRequiredResult):
                return result, None, asked
            responses = {}
            for key, request in result.input_requests.items():
                if isinstance(request, types.CreateMessageRequest):
                    asked.append(request.params.messages[-1].content.text)
                    text = types.TextContent(type="text", text='["a"]')
                    responses[key] = types.CreateMessageResult(role="assistant", model="m", content=text)
                else:
                    responses[key] = types.ElicitResult(action="accept", content={"good_enough": True})
            state = result.request_state
        return result, responses, asked


def _workflow_waiting(tmp_path: Path) -> tuple[Path, str, dict[str, str], tuple[str, str], Any, Any]:
    """chain_of_thought served from a folder of its own with a store, its run waiting at step `reason` (the
    problem decomposed): (the workflow file, its text, the servers' environment, the store option, the waiting
    result, the answers to it)."""
    workflow = tmp_path / "flows" / "chain_of_thought.yaml"
    workflow.parent.mkdir()
    text = (Path(__file__).resolve().parent.parent / "examples" / "workflows" / "chain_of_thought.yaml").read_text()
    workflow.write_text(text)
    env = {"BRANCHC_CACHE": str(tmp_path / "cache"), "BRANCHC_STATE_DIR": str(tmp_path / "state")}
    store = ("--store", f"sqlite:///{tmp_path / 'runs.db'}")
    with http_server(workflow, env, *store) as url:
        waiting, answers, asked = anyio.run(_workflow_rounds, url, 2)
    assert isinstance(waiting, types.InputRequiredResult) and "Focus on sub-task 1 of 1: a" in asked[-1]
    return workflow, text, env, store, waiting, answers


@pytest.mark.usefixtures("state_key_in_env")
def test_a_workflow_run_goes_on_at_its_step_after_a_deploy(tmp_path) -> None:
    workflow, text, env, store, waiting, answers = _workflow_waiting(tmp_path)
    step = "    - id: check\n      instruction: Check the analyses.\n      save: checked\n\n    - id: synthesize\n"
    workflow.write_text(text.replace("    - id: synthesize\n", step))  # a step added after the one that waits
    with http_server(workflow, env, *store) as url:
        done, _, asked = anyio.run(_workflow_rounds, url, 10, waiting.request_state, answers)
    assert not done.is_error, done
    assert done.structured_content["status"] == "complete" and done.structured_content["result"] == '["a"]'
    assert [prompt.split("\n", 1)[0] for prompt in asked] == ["Check the analyses.", "Review all previous analyses:"]


@pytest.mark.usefixtures("state_key_in_env")
def test_a_workflow_run_whose_step_is_gone_finishes_on_the_kept_workflow(tmp_path) -> None:
    workflow, text, env, store, waiting, answers = _workflow_waiting(tmp_path)
    # the step the run waits at renamed, the next one reworded: the new workflow cannot take the run
    workflow.write_text(text.replace("id: reason", "id: analyse").replace("Review all previous", "Combine the"))
    with http_server(workflow, env, *store) as url:
        done, _, asked = anyio.run(_workflow_rounds, url, 10, waiting.request_state, answers)
        _, _, fresh = anyio.run(_workflow_rounds, url, 3)
    assert not done.is_error, done
    assert done.structured_content["status"] == "complete"
    assert asked[0].startswith("Review all previous analyses:")  # the old workflow's next step
    assert fresh[-1].startswith("Combine the analyses:")  # a new call runs the new one


@pytest.mark.usefixtures("state_key_in_env")
def test_a_self_contained_request_state_goes_on_after_a_deploy(tmp_path) -> None:
    """No store: the request_state is the whole run, sealed. A deploy (the same key) takes it where its point allows."""
    source, env = deployable(tmp_path)
    with http_server(source, env, "--store", "none") as url:
        waiting, answers = anyio.run(_rounds, url, 3)
    source.write_text(RENAMED)
    with http_server(source, env, "--store", "none") as url:
        refused, _ = anyio.run(_rounds, url, 1, waiting.request_state, answers)
    assert refused.is_error and "waits at point 'for/sample:reply'" in refused.content[0].text
    source.write_text(dict((e[0], e[1]) for e in EDITS)["change a sample's prompt"])
    with http_server(source, env, "--store", "none") as url:  # the same request_state, still good
        done, _ = anyio.run(_rounds, url, 20, waiting.request_state, answers)
    assert not done.is_error and done.structured_content == {"notes": ["x", "x", "x"], "pick": 1, "final": "x"}


def test_a_forged_move_is_checked_as_any_snapshot_is(saved) -> None:
    """A snapshot that claims another build (another hash) goes through the same checks as one of this build: it
    cannot put into the compiler's own variables what its code never puts there, nor name what was not live."""
    texts, _ = saved
    new = load_source(dict((e[0], e[1]) for e in EDITS)["edit a comment"], MODULE, f"{MODULE}.py")
    try:
        data = json.loads(texts[1])  # the client waits in the loop: its iterator is live
        (entry,) = cliententries(data)
        assert "_bc_it1" in entry["vars"] and "_bc_it1" in entry["live"]
        entry["hash"] = "0" * 16
        forged = json.loads(json.dumps(data))
        (forged_entry,) = cliententries(forged)
        forged_entry["vars"]["_bc_it1"] = 5  # not the loop's iterator
        with pytest.raises(RunStateError, match=r"_bc_it1"):
            load_run(json.dumps(forged))
        forged_entry["vars"]["_bc_it1"] = entry["vars"]["_bc_it1"]
        forged_entry["live"] = "ctx"  # not a list of names
        with pytest.raises(RunStateError, match=r"\.live: expected the names live at the point"):
            load_run(json.dumps(forged))
        forged_entry["live"] = [name for name in entry["live"] if name != "notes"]  # a variable it says was not live
        with pytest.raises(RunStateError, match=r"\.live: expected the names live at the point, its variables among"):
            load_run(json.dumps(forged))
        assert drive(new, text=json.dumps(data)) == drive(new)  # the honest one moves
    finally:
        load_source(BASE, MODULE, f"{MODULE}.py")


def cliententries(data: Any) -> list[dict]:
    return [entry for entry in entries(data) if entry.get("t") == "gen" and entry["fn"].endswith(":client")]
