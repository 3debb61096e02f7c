"""Workflows served to the real `mcp` client (issue 14): the seed's guided shape (start_NAME, workflow_submit,
workflow_continue, each result with instruction, current_step, next_action and state_id) and the one-call tool
whose steps are samples and elicitations, in both protocol eras; the guidance prompt; state ids that are
reused or expired; answers refused before they are fed; a run that survives a server restart with --store.

Every end result is compared with the workflow run natively (`run_tool` on a MockClient) on the same answers."""

from __future__ import annotations

import itertools
import os
import signal
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
import yaml
from _bridge_support import KEY, Scripted, free_port, listening, stdio, within
from _postgres_support import needs_postgres
from _redis_support import RedisServer, needs_redis
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

from branchc import run_tool
from branchc.bridge import mount
from branchc.bridge.loading import ServeLoadError, load_served_tools, served_tools
from branchc.bridge.server import create_server
from branchc.testing import MockClient
from branchc.workflows import load_workflow_tool

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "workflows" / "chain_of_thought.yaml"
RESPONSES = yaml.safe_load((ROOT / "examples" / "workflows" / "chain_of_thought.responses.yaml").read_text())
PARAMS = {"problem": "Build an authentication system", "max_subtasks": 3}
ERAS = ["legacy", "2026-07-28"]

TRIAGE = """\
workflow:
  name: triage
  description: Triage a bug report
  guidance: Triage one report at a time.
  params:
    report: {type: string, description: The bug report}
  steps:
    - id: read
      instruction: "Read this report: {{ report }}"
    - id: severity
      answer_by: sampling
      instruction: "Rate the severity of this report from 1 to 5: {{ report }}"
      save: severity
      schema: {type: integer}
    - id: owner
      answer_by: user
      instruction: "Severity {{ severity }}. Which team owns it?"
      save: team
      schema: {type: string, enum: [web, api]}
      next:
        - if: severity >= 4
          goto: page
      complete: "{{ team }} at severity {{ severity }}"
    - id: page
      instruction: "Write the page for team {{ team }}"
      save: page
      complete: true
"""


@pytest.fixture
def flows(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A folder with the chain_of_thought example and the triage workflow."""
    folder = tmp_path / "workflows"
    folder.mkdir()
    (folder / "chain_of_thought.yaml").write_text(EXAMPLE.read_text())
    (folder / "triage.yaml").write_text(TRIAGE)
    return folder, {"BRANCHC_CACHE": str(tmp_path / "cache")}


def waiting(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    value = result.structured_content
    assert value["status"] == "in_progress", value
    assert value["next_action"]["arguments"]["state_id"] == value["state_id"]
    return value


def refused(result: types.CallToolResult) -> str:
    assert result.is_error, result.structured_content
    return result.content[0].text


async def native(path: Path, params: dict[str, Any], samples: list[str], elicits: list[dict]) -> Any:
    """The workflow run natively on these answers (what every served run must return)."""
    return await run_tool(load_workflow_tool(path), params, MockClient(list(samples), list(elicits)))


async def submit(session: Any, step: dict[str, Any], answer: Any) -> types.CallToolResult:
    assert step["next_action"]["tool"] == "workflow_submit" and step["next_action"]["with"] == "answer"
    return await within(30, session.call_tool("workflow_submit", {"state_id": step["state_id"], "answer": answer}))


async def guided_chain(session: Any) -> tuple[Any, list[dict[str, Any]]]:
    """chain_of_thought driven guided to the end with the example's answers: (the result, each step shown)."""
    samples = iter(RESPONSES["sample"])
    shown = [waiting(await within(60, session.call_tool("start_chain_of_thought", PARAMS)))]
    reviews = iter(answer["content"] for answer in RESPONSES["elicit"])
    while True:
        step = shown[-1]
        answer = next(reviews) if step.get("ask_user") else next(samples)
        result = await submit(session, step, yaml.safe_load(answer) if step["current_step"] == "decompose" else answer)
        assert not result.is_error, result.content[0].text
        if result.structured_content.get("status") == "complete":
            return result.structured_content, shown
        shown.append(waiting(result))


# -- guided: the seed's shape ------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_the_model_is_guided_through_chain_of_thought_end_to_end(era, flows):
    folder, env = flows
    expected = await native(EXAMPLE, PARAMS, RESPONSES["sample"], RESPONSES["elicit"])
    async with Client(stdio(folder, env), mode=era) as session:  # no sampling, no elicitation: only tool calls
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert {"chain_of_thought", "start_chain_of_thought", "workflow_submit", "workflow_continue"} <= set(listed)
        assert listed["start_chain_of_thought"].input_schema["properties"].keys() == {"problem", "max_subtasks"}
        assert listed["start_chain_of_thought"].input_schema["required"] == ["problem"]
        result, shown = await guided_chain(session)
    assert result == expected
    steps = [(step["current_step"], step.get("item")) for step in shown]
    assert steps == [
        ("decompose", None),
        *[("reason", {"number": n, "of": 3}) for n in (1, 2, 3)],
        ("synthesize", None),
        ("review", None),
        ("synthesize", None),  # the review asked for more: the conditional next went back
        ("review", None),
    ]
    decompose, reason_2, resynthesize = shown[0], shown[2], shown[6]
    assert decompose["instruction"].startswith("Break down this problem into at most 3 logical sub-tasks.")
    assert decompose["answer_schema"] == {"type": "array", "items": {"type": "string"}}
    assert "JSON Schema" not in decompose["instruction"]  # the schema is given apart, not in the text
    assert decompose["saves_as"] == "subtasks"
    assert reason_2["instruction"].startswith("Focus on sub-task 2 of 3: JWT issuing and validation")
    assert "The reviewer asked for: Add rate limiting" in resynthesize["instruction"]
    review = shown[5]
    assert review["ask_user"] is True and review["answer_schema"]["required"] == ["good_enough"]
    assert len({step["state_id"] for step in shown}) == len(shown)  # a new state id at every step
    assert "saved" not in shown[0] and "previous_thought" not in shown[0]  # nothing was answered yet
    for before, after in itertools.pairwise(shown):  # the seed's acknowledgment of each answer
        assert (after["saved"], after["previous_thought"]) == (True, before["saves_as"])


@pytest.mark.parametrize("era", ERAS)
async def test_the_same_workflow_runs_as_one_call_where_the_client_samples_and_elicits(era, flows):
    folder, env = flows
    expected = await native(EXAMPLE, PARAMS, RESPONSES["sample"], RESPONSES["elicit"])
    prompts = await _prompts_of_native_run()
    client = Scripted(prompts, RESPONSES["elicit"])
    async with Client(stdio(folder, env), mode=era, **client.callbacks()) as session:
        result = await within(60, session.call_tool("chain_of_thought", PARAMS))
    assert not result.is_error, result.content[0].text
    assert result.structured_content == expected
    assert len(client.sampled) == len(RESPONSES["sample"]) and len(client.elicited) == 2
    # a model step carries the history: the last synthesis saw every earlier turn
    assert len(client.sampled[-1].messages) == 2 * len(RESPONSES["sample"]) - 1


@pytest.mark.parametrize("era", ERAS)
async def test_one_call_keeps_the_history_for_model_steps_and_not_for_sampling_steps(era, flows):
    folder, env = flows
    report = {"report": "The login page returns 500"}
    answers = {
        "Read this report: The login page returns 500": "read it",
        "Rate the severity of this report from 1 to 5: The login page returns 500"
        '\n\nAnswer with JSON only, matching this JSON Schema:\n{"type": "integer"}': "4",
        "Write the page for team api": "Paging api",
    }
    client = Scripted(answers, [{"action": "accept", "content": {"answer": "api"}}])
    async with Client(stdio(folder, env), mode=era, **client.callbacks()) as session:
        result = await within(60, session.call_tool("triage", report))
    assert not result.is_error, result.content[0].text
    expected = await native(folder / "triage.yaml", report, list(answers.values()), client.elicits)
    assert result.structured_content == expected and expected["result"] == "Paging api"
    read, severity, page = client.sampled
    assert len(read.messages) == 1 and len(severity.messages) == 1  # the sampling step: its prompt alone
    assert [m.content_as_list[0].text for m in page.messages] == [  # the model step: the history, without it
        "Read this report: The login page returns 500",
        "read it",
        "Write the page for team api",
    ]
    (form,) = client.elicited
    assert form.requested_schema["properties"]["answer"]["enum"] == ["web", "api"]


async def _prompts_of_native_run() -> dict[str, str]:
    client = MockClient(list(RESPONSES["sample"]), list(RESPONSES["elicit"]))
    await run_tool(load_workflow_tool(EXAMPLE), PARAMS, client)
    return {call.last_text: answer for call, answer in zip(client.sample_calls, RESPONSES["sample"], strict=True)}


@pytest.mark.parametrize("era", ERAS)
async def test_continue_sampling_and_user_steps_are_told_apart(era, flows):
    folder, env = flows
    report = {"report": "The login page returns 500"}
    async with Client(stdio(folder, env), mode=era) as session:
        read = waiting(await session.call_tool("start_triage", report))
        assert read["current_step"] == "read" and "saves_as" not in read
        assert read["next_action"]["tool"] == "workflow_continue" and read["next_action"]["with"] == "acknowledgment"
        assert "isolated" not in read
        text = refused(await session.call_tool("workflow_submit", {"state_id": read["state_id"]}))
        assert "answer: step 'read' needs one" in text and "the run still waits" in text
        severity = waiting(
            await session.call_tool("workflow_continue", {"state_id": read["state_id"], "acknowledgment": "read it"})
        )
        assert severity["current_step"] == "severity" and severity["isolated"] is True
        assert (severity["saved"], severity["previous_thought"]) == (False, "read")  # continued: nothing kept
        assert "on its own" in severity["how_to_answer"]
        text = refused(await session.call_tool("workflow_continue", {"state_id": severity["state_id"]}))
        assert "step 'severity' needs an answer: call workflow_submit" in text
        owner = waiting(await submit(session, severity, 4))  # JSON, not text: sent on as its text
        assert owner["instruction"] == "Severity 4. Which team owns it?"
        assert owner["ask_user"] is True and owner["answer_schema"]["properties"]["answer"]["enum"] == ["web", "api"]
        text = refused(await submit(session, owner, "mobile"))  # off the form's schema
        assert "does not fit the form's schema" in text and "the run still waits" in text
        page = waiting(await submit(session, owner, "api"))  # one value: the form's `answer` field
        assert page["current_step"] == "page" and page["instruction"] == "Write the page for team api"
        done = await submit(session, page, "Paging api: login 500s")
        assert done.structured_content["result"] == "Paging api: login 500s"
        assert done.structured_content["saved"]["team"] == "api"
        low = waiting(await session.call_tool("start_triage", report))
        low = waiting(await session.call_tool("workflow_continue", {"state_id": low["state_id"]}))
        low = waiting(await submit(session, low, "2"))
        declined = await submit(session, low, "decline")
        assert declined.structured_content["status"] == "decline"
    expected = await native(
        folder / "triage.yaml",
        report,
        ["read it", "4", "Paging api: login 500s"],
        [{"action": "accept", "content": {"answer": "api"}}],
    )
    assert done.structured_content == expected


NOT_AN_ARRAY = "the answer does not read as the array its schema asks for"


async def test_a_bad_answer_is_refused_before_it_is_fed_and_the_state_id_stays_good(flows):
    folder, env = flows
    async with Client(stdio(folder, env), mode="legacy") as session:
        first = waiting(await session.call_tool("start_chain_of_thought", PARAMS))
        for answer, why in (
            ("three sub-tasks", f"{NOT_AN_ARRAY}: not valid JSON"),
            ("[" * 5000 + "]" * 5000, f"{NOT_AN_ARRAY}: nested more than 200 deep"),  # bounded, as all input
            (["a", 2], "the answer does not fit the step's schema at $[1]: 2 is not of type 'string'"),
        ):
            text = refused(await submit(session, first, answer))
            assert f"answer: {why}" in text and "the run still waits" in text
        second = waiting(await submit(session, first, ["a", "b"]))  # the same state id, still good
        assert second["current_step"] == "reason" and second["item"] == {"number": 1, "of": 2}
        bad = refused(await session.call_tool("start_chain_of_thought", {"problem": 3}))
        assert "invalid params for start_chain_of_thought" in bad and "problem" in bad


# -- state ids: once, and not forever ------------------------------------------------------------------------


async def test_a_used_state_id_is_refused(flows):
    folder, env = flows
    async with Client(stdio(folder, env), mode="2026-07-28") as session:
        first = waiting(await session.call_tool("start_chain_of_thought", PARAMS))
        waiting(await submit(session, first, ["a"]))
        text = refused(await submit(session, first, ["b"]))  # the same step answered again: a replay
        assert f"state_id {first['state_id']!r} is unknown, already used or expired" in text
        text = refused(await session.call_tool("workflow_submit", {"state_id": "made-up", "answer": "x"}))
        assert "is unknown, already used or expired" in text


async def test_an_expired_state_id_is_refused(flows):
    folder, env = flows
    async with Client(stdio(folder, env, "--guided-ttl", "1"), mode="legacy") as session:
        first = waiting(await session.call_tool("start_chain_of_thought", PARAMS))
        await anyio.sleep(1.5)
        text = refused(await submit(session, first, ["a"]))
        assert "is unknown, already used or expired (runs wait 1 s)" in text


async def test_workflow_submit_continues_workflow_runs_only(flows):
    """With --guided, any tool the client cannot answer for is guided through branchc_resume (the generic
    shape); a workflow's run may go on through either tool, being the same machine, but workflow_submit
    refuses another tool's run, which still waits under its state id."""
    folder, env = flows
    (folder / "ask.py").write_text(
        "from branchc import Context, tool\n\n\n@tool(requires={'sampling'})\ndef ask(ctx: Context):\n"
        "    answer = yield ctx.sample(prompt='Say hi')\n    return answer.text\n"
    )
    async with Client(stdio(folder, env, "--guided"), mode="legacy") as session:
        plain = (await session.call_tool("chain_of_thought", PARAMS)).structured_content
        assert plain["status"] == "waiting_for_answers" and plain["requests"][0]["kind"] == "sample"
        step = waiting(await session.call_tool("start_chain_of_thought", PARAMS))
        mixed = await session.call_tool(
            "branchc_resume", {"state_id": step["state_id"], "answers": {"sample-1": '["a"]'}}
        )
        assert mixed.structured_content["status"] == "waiting_for_answers"
        asked = await session.call_tool("ask", {})
        assert not asked.is_error, asked.content[0].text
        asked = asked.structured_content
        text = refused(await session.call_tool("workflow_submit", {"state_id": asked["state_id"], "answer": "hi"}))
        assert "a run of the tool 'ask', not of a workflow; continue it with branchc_resume" in text
        done = await session.call_tool("branchc_resume", {"state_id": asked["state_id"], "answers": {"sample-1": "hi"}})
        assert not done.is_error and done.content[0].text == "hi"


# -- the guidance prompt -------------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_each_workflow_has_its_guidance_as_a_prompt(era, flows):
    folder, env = flows
    async with Client(stdio(folder, env), mode=era) as session:
        prompts = {prompt.name: prompt for prompt in (await session.list_prompts()).prompts}
        assert set(prompts) == {"chain_of_thought", "triage"}
        assert [argument.name for argument in prompts["triage"].arguments] == ["report"]
        got = await session.get_prompt("triage", {"report": "500 on login"})
        (message,) = got.messages
        text = message.content.text
        assert message.role == "user"
        assert "Start with the tool start_triage" in text and "workflow_submit" in text and "workflow_continue" in text
        assert text.rstrip().endswith('call start_triage with {"report": "500 on login"}.')
        assert "Triage one report at a time." in text  # the workflow's own guidance
        with pytest.raises(MCPError, match="unknown prompt 'nope'"):
            await session.get_prompt("nope")


# -- restarts ------------------------------------------------------------------------------------------------


@pytest.fixture(
    params=["sqlite", pytest.param("redis", marks=needs_redis), pytest.param("postgres", marks=needs_postgres)]
)
def store_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
        return
    if request.param == "postgres":
        yield f"{request.getfixturevalue('postgres_server').url}?schema=flows{time.monotonic_ns()}"
        return
    redis = RedisServer(tmp_path / "redis").start()
    try:
        yield redis.url
    finally:
        redis.stop()


async def test_a_guided_workflow_run_survives_a_server_restart_with_a_store(store_url, flows):
    folder, env = flows
    url = store_url
    port = free_port()
    command = [
        sys.executable, "-m", "branchc", "serve", str(folder), "--http", f"127.0.0.1:{port}",
        "--state-key", KEY, "--store", url,
    ]  # fmt: skip
    address = f"http://127.0.0.1:{port}/mcp"
    expected = await native(EXAMPLE, PARAMS, RESPONSES["sample"], RESPONSES["elicit"])
    samples = iter(RESPONSES["sample"])
    with listening(command, port, env) as process:
        async with Client(address, mode="legacy") as session:
            first = waiting(await session.call_tool("start_chain_of_thought", PARAMS))
            second = waiting(await submit(session, first, yaml.safe_load(next(samples))))
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    with listening(command, port, env):
        async with Client(address, mode="2026-07-28") as session:  # another era, another process: the same run
            step = second
            reviews = iter(answer["content"] for answer in RESPONSES["elicit"])
            while True:
                result = await submit(session, step, next(reviews) if step.get("ask_user") else next(samples))
                if result.structured_content.get("status") == "complete":
                    break
                step = waiting(result)
            assert result.structured_content == expected
            text = refused(await submit(session, first, ["again"]))  # used before the restart: still used
            assert "is unknown, already used or expired" in text


# -- loading ------------------------------------------------------------------------------------------------


def test_workflows_of_one_file_name_in_two_folders_are_both_served(tmp_path, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    for part, name in (("a", "first"), ("b", "second")):
        (tmp_path / "flows" / part).mkdir(parents=True)
        (tmp_path / "flows" / part / "flow.yaml").write_text(
            textwrap.dedent(f"""
            workflow:
              name: {name}
              steps:
                - id: only
                  instruction: Say {name}
                  complete: true
            """)
        )
    tools, problems = served_tools(tmp_path / "flows")
    assert not [problem for problem in problems if problem.severity == "error"], problems
    assert {"first", "second"} <= set(tools)


def test_a_tool_named_like_a_workflows_guided_tool_is_a_load_error(tmp_path, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / "chain_of_thought.yaml").write_text(EXAMPLE.read_text())
    (folder / "clash.py").write_text(
        "from branchc import Context, tool\n\n\n@tool\ndef workflow_submit(ctx: Context):\n"
        "    answer = yield ctx.sample(prompt='x')\n    return answer.text\n"
    )
    monkeypatch.delitem(sys.modules, "clash", raising=False)
    _, problems = served_tools(folder)
    (problem,) = [problem for problem in problems if "workflow_submit" in problem.message]
    assert problem.severity == "error" and problem.line == 5 and problem.path.endswith("clash.py")


# -- edges (in process: the real client on the SDK's in-memory transport) -------------------------------------

EDGES = """\
workflow:
  name: edges
  params:
    xs: {type: array, items: {type: integer}, default: []}
    n: {type: integer, default: 2}
  steps:
    - id: plain
      instruction: Note something
    - id: checked
      instruction: "A number, please ({{ n }})"
      schema: {type: integer}
    - id: text
      instruction: Say a word
      schema: {type: string}
      save: word
    - id: last
      instruction: The end
      complete: true
"""

SPIN = """\
workflow:
  name: spin
  params:
    xs: {type: array, items: {type: integer}}
  steps:
    - id: each
      foreach: {in: xs}
      instruction: "{{ item }}"
      save: outs
      next:
        - if: outs | length < 100
          goto: each
      complete: true
"""


@pytest.fixture
def edges(tmp_path, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "edges"
    folder.mkdir()
    (folder / "edges.yaml").write_text(EDGES)
    (folder / "spin.yaml").write_text(SPIN)
    return create_server(load_served_tools(folder))


async def test_a_step_whose_answer_is_used_is_submitted_and_any_other_continued(edges):
    async with Client(edges, mode="legacy") as session:
        plain = waiting(await session.call_tool("start_edges", {}))
        assert plain["next_action"]["tool"] == "workflow_continue"
        checked = waiting(await session.call_tool("workflow_continue", {"state_id": plain["state_id"]}))
        assert checked["next_action"]["tool"] == "workflow_submit"  # not saved, but its schema checks it
        assert "needs an answer" in refused(await session.call_tool("workflow_continue", checked))
        text = waiting(await submit(session, checked, 7))
        word = waiting(await submit(session, text, "42"))  # text that reads as JSON is still the text asked for
        assert word["current_step"] == "last" and word["next_action"]["tool"] == "workflow_submit"  # the result
        done = (await submit(session, word, "bye")).structured_content
        assert done["result"] == "bye" and done["saved"]["word"] == "42"


async def test_steps_that_go_round_asking_nothing_fail_the_run_and_the_server_goes_on(edges):
    async with Client(edges, mode="legacy") as session:
        text = refused(await within(10, session.call_tool("start_spin", {"xs": []})))
        assert "the steps go round without asking anything" in text and "spin.yaml:6: step 'each'" in text
        assert text.startswith("spin: ") and "workflow_spin.py" not in text  # the YAML's place, not generated code
        first = waiting(await session.call_tool("start_spin", {"xs": [1]}))  # a list with items asks
        assert first["current_step"] == "each" and first["item"] == {"number": 1, "of": 1}


async def test_a_prompt_argument_that_reads_as_json_is_passed_as_json(edges):
    async with Client(edges, mode="legacy") as session:
        got = await session.get_prompt("edges", {"n": "5", "xs": "[1, 2]"})
        assert got.messages[0].content.text.rstrip().endswith('call start_edges with {"n": 5, "xs": [1, 2]}.')


ONE_STEP = "workflow:\n  name: {name}\n  steps:\n    - {{id: a, instruction: x, complete: true}}\n"


def test_mount_refuses_a_workflow_named_like_a_prompt_of_the_server(tmp_path, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    (tmp_path / "review.yaml").write_text(ONE_STEP.format(name="review"))
    server = MCPServer("own")

    @server.prompt()
    def review(code: str) -> str:
        return code

    with pytest.raises(ValueError, match="review: the server has a prompt of that name already"):
        mount(server, tmp_path)


def test_two_workflow_files_that_would_share_a_module_name_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("BRANCHC_CACHE", str(tmp_path / "cache"))
    for name, tool in (("x.yaml", "one"), ("x.yml", "two")):
        (tmp_path / name).write_text(ONE_STEP.format(name=tool))
    clash = r"x\.yml:1:1: error: its tool module would be named workflow_x, as .*x\.yaml"
    with pytest.raises(ServeLoadError, match=clash):
        load_served_tools(tmp_path)


# -- the seed's other workflows, in the seed's template syntax ------------------------------------------------

SEED_EXAMPLES = {
    "deep_research": {"topic": "Why the sky is blue", "questions": 2},
    "trip": {"destination": "Lisbon"},
}


@pytest.fixture
def seed_examples(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    folder = tmp_path / "examples"
    folder.mkdir()
    for name in SEED_EXAMPLES:
        (folder / f"{name}.yaml").write_text((EXAMPLE.parent / f"{name}.yaml").read_text())
    return folder, {"BRANCHC_CACHE": str(tmp_path / "cache")}


def example_responses(name: str) -> dict[str, list]:
    return yaml.safe_load((EXAMPLE.parent / f"{name}.responses.yaml").read_text())


@pytest.mark.parametrize("name", sorted(SEED_EXAMPLES))
@pytest.mark.parametrize("era", ERAS)
async def test_the_seeds_workflows_are_served_guided_and_as_one_call(name, era, seed_examples):
    folder, env = seed_examples
    params, answers = SEED_EXAMPLES[name], example_responses(name)
    expected = await native(folder / f"{name}.yaml", params, answers["sample"], answers["elicit"])
    async with Client(stdio(folder, env), mode=era) as session:  # guided: only tool calls
        samples, forms = iter(answers["sample"]), iter(answer["content"] for answer in answers["elicit"])
        step = waiting(await within(60, session.call_tool(f"start_{name}", params)))
        shown = [step]
        while True:
            answer = next(forms) if step.get("ask_user") else next(samples)
            result = await submit(session, step, answer)
            assert not result.is_error, result.content[0].text
            if result.structured_content["status"] == "complete":
                break
            step = waiting(result)
            shown.append(step)
    assert result.structured_content == expected
    assert not any("${" in step["instruction"] for step in shown)  # the seed's templates were rendered
    recorded = MockClient(list(answers["sample"]), list(answers["elicit"]))
    await run_tool(load_workflow_tool(folder / f"{name}.yaml"), params, recorded)
    prompts = {call.last_text: answer for call, answer in zip(recorded.sample_calls, answers["sample"], strict=True)}
    client = Scripted(prompts, answers["elicit"])
    async with Client(stdio(folder, env), mode=era, **client.callbacks()) as session:  # one call
        result = await within(60, session.call_tool(name, params))
    assert not result.is_error, result.content[0].text
    assert result.structured_content == expected
