"""The runs console over HTTP (branchc/console): what each page shows, to whom, and what each POST may do.

Real parts: the runs are made by a real `branchc serve --http --console` subprocess called by the real `mcp` client
as alice and bob (tests/_console_support.py); each test looks at its own copy of that SQLite store through the
console's app (Starlette's TestClient) with the real token-file verifier, the served tools loaded as `--tools`
loads them, and the finally blocks of a cancelled run running here. The mounted console of the live server, and
`branchc console` refusing what it must, are checked over real HTTP.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest
from _bridge_support import KEY, KEYS
from _console_support import DRAFT, HOSTILE_NAME, NAME, TOKENS, TOOL_FILE, copy_store, serving
from markupsafe import escape
from starlette.testclient import TestClient

from branchc.bridge.auth import TokenFileVerifier
from branchc.bridge.runs import load_tools
from branchc.bridge.settings import ServeSettings, SettingsError
from branchc.console import CONTENT_SECURITY_POLICY, Console, console_app
from branchc.console.serving import check_console_exposure
from branchc.store import open_store

pytestmark = [
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.usefixtures("state_key_in_env"),
]

HOST = "127.0.0.1:8766"
BASE = f"http://{HOST}"


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Any:
    with serving(tmp_path_factory.mktemp("console_served")) as done:
        yield done


@pytest.fixture
def store(served, tmp_path, monkeypatch) -> Any:
    """This test's copy of the served store (and fresh markers); tools compile in the server's cache."""
    monkeypatch.setenv("BRANCHC_CACHE", str(served.cache))
    for marker in served.markers.iterdir():
        marker.unlink()
    made = open_store(copy_store(served, tmp_path / "runs.db"), KEYS)
    yield made
    made.close()


def console(served: Any, store: Any, *, tools: bool = True, auth: bool = True, **settings: Any) -> Console:
    return Console(
        store,
        KEYS,
        ServeSettings.load(http=HOST, state_key=KEY, operators="ops", **settings),
        tools=load_tools(TOOL_FILE) if tools else None,
        verifier=TokenFileVerifier(served.tokens) if auth else None,
    )


def browser(made: Console, who: str | None = None) -> TestClient:
    """A client of the console; `who`: it sends that principal's bearer token."""
    headers = {"Authorization": f"Bearer {TOKENS[who]}"} if who else {}
    return TestClient(console_app(made), base_url=BASE, headers=headers, follow_redirects=False)


def csrf(page: httpx.Response) -> str:
    found = re.search(r'<meta name="csrf-token" content="([0-9a-f]{64})">', page.text)
    assert found, page.text[:2000]
    return found.group(1)


def listed(page: httpx.Response) -> list[str]:
    """The run ids the runs page lists, in order."""
    assert page.status_code == 200, page.text[:2000]
    return re.findall(r'<a href="/runs/([^"]+)" class="run-link">', page.text)


def post(client: TestClient, path: str, token: str, **fields: str) -> httpx.Response:
    return client.post(path, data={"csrf": token, **fields}, headers={"Origin": BASE})


class Elements(HTMLParser):
    """Every element of a page: (tag, attributes)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs)))


def elements(text: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = Elements()
    parser.feed(text)
    return parser.found


# -- who sees what ---------------------------------------------------------------------------------------------


def test_each_principal_sees_its_own_runs_and_operators_see_all(served, store):
    made = console(served, store)
    ids = served.ids
    alice = listed(browser(made, "alice").get("/"))
    assert sorted(alice) == sorted(
        ids[name] for name in ("alice-survey", "alice-hostile", "alice-triage", "alice-done")
    )
    assert listed(browser(made, "bob").get("/")) == [ids["bob-survey"]]
    everyone = browser(made, "ops").get("/")
    assert sorted(listed(everyone)) == sorted(ids.values())
    assert 'id="f-owner"' in everyone.text and 'id="f-owner"' not in browser(made, "alice").get("/").text
    # no one: a browser is sent to sign in, a script told 401; a token the file lacks is no one
    anonymous = browser(made).get("/?tool=survey")
    assert anonymous.status_code == 303 and anonymous.headers["location"] == "/login?next=%2F%3Ftool%3Dsurvey"
    wrong = browser(made).get("/", headers={"Authorization": "Bearer not-a-token-of-the-file"})
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"].startswith("Bearer")


def test_another_principals_run_is_not_found_and_cannot_be_cancelled_or_forked(served, store):
    made = console(served, store)
    bob = browser(made, "bob")
    run = served.ids["alice-survey"]
    page = bob.get(f"/runs/{run}")
    unknown = bob.get("/runs/no-such-run-at-all")
    assert page.status_code == unknown.status_code == 404
    assert page.text.replace(run, "ID") == unknown.text.replace("no-such-run-at-all", "ID")  # exactly as unknown
    token = csrf(bob.get("/"))
    assert post(bob, f"/runs/{run}/cancel", token).status_code == 404
    assert post(bob, f"/runs/{run}/fork", token, at="0").status_code == 404
    assert store.load(run).status == "waiting" and served.marks("alice-survey") == []
    assert len(store.list()) == 5  # no fork was made
    assert browser(made, "ops").get(f"/runs/{run}").status_code == 200  # an operator's


# -- the runs page -----------------------------------------------------------------------------------------------


def test_the_runs_page_filters_by_tool_status_owner_age_and_build(served, store):
    ops = browser(console(served, store), "ops")
    ids = served.ids
    assert listed(ops.get("/?tool=triage")) == [ids["alice-triage"]]
    assert listed(ops.get("/?status=done")) == [ids["alice-done"]]
    assert listed(ops.get("/?owner=bob")) == [ids["bob-survey"]]
    surveys = sorted(ids[name] for name in ("alice-survey", "alice-hostile", "bob-survey"))
    assert sorted(listed(ops.get("/?tool=survey&status=waiting"))) == surveys
    assert len(listed(ops.get("/?age=1h"))) == 5 and listed(ops.get("/?age=gt1d")) == []
    build = store.load(ids["alice-survey"]).meta.extra["build"]
    assert len(listed(ops.get(f"/?build={build}"))) == 5 and listed(ops.get("/?build=0123456789abcdef")) == []
    page = ops.get("/?tool=triage")
    assert "1 of 5 runs match" in page.text and f'<option value="{build}">' in page.text
    assert '<option value="triage" selected>' in page.text
    # a filter it cannot apply says which and what it takes
    bad = ops.get("/?status=asleep")
    assert bad.status_code == 400 and "status=&#39;asleep&#39;: a run&#39;s status is one of waiting" in bad.text
    bad = ops.get("/?age=yesterday")
    assert bad.status_code == 400 and "age=&#39;yesterday&#39;: give one of 15m, 1h, 1d, 7d, gt1d, gt7d" in bad.text
    # alice's owner filter can only narrow her own runs
    assert listed(browser(console(served, store), "alice").get("/?owner=bob")) == []


# -- a run -----------------------------------------------------------------------------------------------------


def test_a_run_page_shows_where_it_waits_its_variables_history_and_trace_id(served, store):
    made = console(served, store)
    run = served.ids["alice-survey"]
    record = store.load(run)
    page = browser(made, "alice").get(f"/runs/{run}")
    assert page.status_code == 200
    text = page.text
    # the graph: the state it waits at is marked, and the wait names that node
    (waiting,) = re.findall(r'<g id="(n\d+)" class="node waiting">', text)
    assert f'data-node="{waiting}"' in text and "try:body/elicit:approve" in text
    assert "verdict = yield ctx.elicit(&#34;approve&#34;" in text  # the wait's source line, from the manifest
    # live variables: names and kinds, values redacted, even when alice asks for them
    variables = text[text.index('id="vars-title"') : text.index('id="history-title"')]
    for name, kind in (("draft", "SampleResult (model)"), ("handoff", "dict, 2 keys"), ("name", "str, 8 chars")):
        assert re.search(rf"<code>{name}</code></td><td>{re.escape(kind)}</td>", variables), variables
    assert "refunds" not in variables and "Show values" not in variables
    asked = browser(made, "alice").get(f"/runs/{run}?values=1").text
    assert "refunds" not in asked[asked.index('id="vars-title"') : asked.index('id="history-title"')]
    # an operator may see the values, and only when asking
    shown = browser(made, "ops").get(f"/runs/{run}?values=1").text
    shown = shown[shown.index('id="vars-title"') : shown.index('id="history-title"')]
    assert "{&#39;topic&#39;: &#39;refunds&#39;" in shown and escape(repr(NAME)) in shown
    # the history: each checkpoint, what it asked, what answered it and who
    history = text[text.index('id="history-title"') :]
    assert [int(k) for k in re.findall(r'<td data-label="K">#(\d+)</td>', history)] == [2, 1, 0]
    assert (
        "Who is asking about refunds?" in history
        and DRAFT in history
        and f"accept {{&#34;name&#34;: &#34;{NAME}" in history
    )
    assert history.count('<td data-label="By">alice</td>') == 2
    # the trace id: the run's trace, as its first round's span context keeps it
    trace = record.meta.extra["trace"]["traceparent"].split("-")[1]
    assert re.fullmatch(r"[0-9a-f]{32}", trace) and f'<code id="trace-id">{trace}</code>' in text
    # where two branches wait, both are marked
    triage = browser(made, "alice").get(f"/runs/{served.ids['alice-triage']}").text
    assert triage.count("branch 0.1") >= 1 and triage.count("branch 0.2") >= 1
    assert len(re.findall(r'data-node="n\d+" tabindex="0"', triage)) == 2


def test_cancel_ends_the_run_once_and_fork_makes_a_new_run_of_the_same_owner(served, store):
    made = console(served, store)
    alice = browser(made, "alice")
    run = served.ids["alice-survey"]
    token = csrf(alice.get(f"/runs/{run}"))
    forked = post(alice, f"/runs/{run}/fork", token, at="1")
    assert forked.status_code == 303, forked.text[:2000]
    new = forked.headers["location"].split("/runs/")[1].split("?")[0]
    child = store.load(new)
    assert child.owner == "alice" and child.status == "waiting" and new != run
    assert child.meta.extra["forked_from"] == {"run": run, "k": 1}
    assert [w.point for w in child.meta.waits] == ["try:body/sample:draft"]  # where the parent waited at K=1
    assert "This run is a fork" in alice.get(forked.headers["location"]).text
    done = post(alice, f"/runs/{run}/cancel", token)
    assert done.status_code == 303 and done.headers["location"] == f"/runs/{run}?done=cancelled"
    assert store.load(run).status == "cancelled"
    assert served.marks("alice-survey") == ["survey"]  # its finally ran once, here
    assert store.load(new).status == "waiting"  # the fork is its own run
    page = alice.get(done.headers["location"]).text
    assert "The run is cancelled" in page and 'disabled aria-describedby="cancel-why"' in page
    again = post(alice, f"/runs/{run}/cancel", token)
    assert again.status_code == 409 and "the run has ended (cancelled)" in again.text
    assert served.marks("alice-survey") == ["survey"]
    bad = post(alice, f"/runs/{run}/fork", token, at="x1")
    assert bad.status_code == 400 and "give a checkpoint number K" in bad.text
    missing = post(alice, f"/runs/{new}/fork", csrf(alice.get(f"/runs/{new}")), at="7")
    assert missing.status_code == 409 and "has no checkpoint 7" in missing.text


def test_a_fork_counts_toward_its_owners_caps(served, store):
    made = console(served, store, principal_max_runs=3)  # alice has three runs waiting already
    alice = browser(made, "alice")
    run = served.ids["alice-survey"]
    refused = post(alice, f"/runs/{run}/fork", csrf(alice.get("/")), at="0")
    assert refused.status_code == 409 and "the most one principal may have (--principal-max-runs 3)" in refused.text
    ops = browser(made, "ops")
    assert post(ops, f"/runs/{run}/fork", csrf(ops.get("/")), at="0").status_code == 303  # operators are not held


def test_posts_without_this_sessions_csrf_token_or_from_another_origin_are_refused(served, store):
    made = console(served, store)
    alice, bob = browser(made, "alice"), browser(made, "bob")
    run = served.ids["alice-survey"]
    token = csrf(alice.get(f"/runs/{run}"))
    path = f"/runs/{run}/cancel"
    assert alice.post(path, data={}, headers={"Origin": BASE}).status_code == 403
    assert post(alice, path, "0" * 64).status_code == 403
    assert post(alice, path, csrf(bob.get("/"))).status_code == 403  # bob's token (and bob's cookie) is not alice's
    fresh = browser(made, "alice")  # another browser of alice's: its own seed cookie
    assert post(fresh, path, token).status_code == 403
    other = alice.post(path, data={"csrf": token}, headers={"Origin": "http://evil.example"})
    assert other.status_code == 403 and "cross-site" in other.text
    referred = alice.post(path, data={"csrf": token}, headers={"Referer": "http://evil.example/page"})
    assert referred.status_code == 403
    assert alice.get("/", headers={"Host": "evil.example"}).status_code == 421  # DNS rebinding
    assert alice.post(path, content=json.dumps({"csrf": token}), headers={"Origin": BASE}).status_code == 403
    assert store.load(run).status == "waiting" and served.marks("alice-survey") == []
    assert post(alice, path, token).status_code == 303  # the same POST with the token: done


def test_what_runs_hold_is_escaped_on_every_page_under_a_strict_policy(served, store):
    ops = browser(console(served, store), "ops")
    pages = [ops.get("/"), ops.get(f"/runs/{served.ids['alice-hostile']}?values=1"), ops.get("/tools/survey")]
    pages.append(ops.get(f"/runs/{served.ids['alice-done']}"))
    for page in pages:
        assert page.status_code == 200
        assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert "script-src 'self'" in CONTENT_SECURITY_POLICY and "unsafe-inline" not in CONTENT_SECURITY_POLICY
        assert page.headers["x-frame-options"] == "DENY" and page.headers["cache-control"] == "no-store"
        assert HOSTILE_NAME not in page.text and "<img" not in page.text
        scripts = [attrs for tag, attrs in elements(page.text) if tag == "script"]
        assert all(a.get("src") == "/static/console.js" or a.get("type") == "application/json" for a in scripts)
        assert not [attrs for tag, attrs in elements(page.text) if any(k.startswith("on") for k in attrs)]
    assert escape(HOSTILE_NAME) in pages[0].text  # shown, as text
    run = pages[1].text
    assert "&lt;script&gt;alert(" in run and "&lt;img src=x onerror=" in run
    states = run.split('<script type="application/json" id="states">')[1].split("</script>")[0]
    assert "<" not in states and "\\u003cscript\\u003e" in states  # the graph's details, no markup in them
    assert ops.get("/static/console.css").headers["x-content-type-options"] == "nosniff"


def test_a_damaged_record_is_named_to_operators_and_unknown_to_others(served, store):
    made = console(served, store)
    run = served.ids["bob-survey"]
    with sqlite3.connect(store.url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE runs SET status = 'done' WHERE run_id = ?", (run,))  # outside the seal: refused
    ops, alice = browser(made, "ops"), browser(made, "alice")
    listing = ops.get("/")
    assert listing.status_code == 200 and f"stored run {run!r}".replace("'", "&#39;") in listing.text
    assert "an operator can see which" in alice.get("/").text and run not in alice.get("/").text
    page = ops.get(f"/runs/{run}")
    assert page.status_code == 500 and "Damaged run" in page.text and "branchc runs cancel" in page.text
    assert alice.get(f"/runs/{run}").status_code == 404
    assert ops.get(f"/runs/{served.ids['alice-survey']}").status_code == 200  # the others still open


# -- tools -------------------------------------------------------------------------------------------------------


def test_a_tool_page_counts_the_runs_waiting_at_each_point(served, store):
    made = console(served, store)
    page = browser(made, "ops").get("/tools/survey").text
    assert page.count('class="node waiting"') == 2
    assert page.count("2 runs wait here") == 1 and page.count("1 run waits here") == 1
    points = page[page.index('id="points-title"') :]
    assert "try:body/elicit:approve" in points and "try:body/elicit:name" in points
    assert all(served.ids[name][:10] in points for name in ("alice-survey", "alice-hostile", "bob-survey"))
    mine = browser(made, "alice").get("/tools/survey").text
    assert mine.count('class="node waiting"') == 1 and served.ids["bob-survey"][:10] not in mine
    listing = browser(made, "alice").get("/tools").text
    assert "Asks who is asking, drafts a note for them" in listing and "/tools/triage" in listing
    assert browser(made, "alice").get("/tools/no_such_tool").status_code == 404


def test_without_tools_cancel_is_shown_disabled_with_the_reason(served, store):
    alice = browser(console(served, store, tools=False), "alice")
    run = served.ids["alice-survey"]
    page = alice.get(f"/runs/{run}").text
    assert 'disabled aria-describedby="cancel-why"' in page and "started without --tools" in page
    refused = post(alice, f"/runs/{run}/cancel", csrf(alice.get("/")))
    assert refused.status_code == 409 and "started without --tools" in refused.text
    assert store.load(run).status == "waiting"


# -- signing in, and who may serve it ----------------------------------------------------------------------------


def test_signing_in_sets_a_session_that_ends_with_its_token(served, store, tmp_path):
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(served.tokens.read_text())
    tokens.chmod(0o600)
    verifier = TokenFileVerifier(tokens)
    made = console(served, store)
    made.verifier = verifier
    browsing = browser(made)
    form = browsing.get("/login?next=/runs/x")
    assert form.status_code == 200 and '<label for="token">Access token</label>' in form.text
    wrong = browsing.post("/login", data={"csrf": csrf(form), "token": "not a token", "next": "/"})
    assert wrong.status_code == 401 and "not one this server accepts" in wrong.text
    skipped = browsing.post("/login", data={"token": TOKENS["alice"], "next": "/"})
    assert skipped.status_code == 403  # a login form needs its CSRF token too
    signed = browsing.post("/login", data={"csrf": csrf(form), "token": TOKENS["alice"], "next": "//evil.example/"})
    assert signed.status_code == 303 and signed.headers["location"] == "/"  # never off to another site
    cookie = signed.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKENS["alice"] not in cookie
    assert len(listed(browsing.get("/"))) == 4  # alice's
    tokens.write_text(f"bob {TOKENS['bob']}\n")  # alice's token taken out of the file
    verifier.reload()
    assert browsing.get("/").status_code == 303  # her session ended with it


def test_without_auth_the_local_user_is_an_operator_and_only_on_loopback(served, store):
    local = browser(console(served, store, auth=False))
    assert len(listed(local.get("/"))) == 5 and "local user" in local.get("/").text
    assert local.get("/login").status_code == 303
    for bind in ("10.0.0.5:8766", "192.0.2.7:80"):
        settings = ServeSettings.load(http=bind, state_key=KEY)
        with pytest.raises(SettingsError, match="the runs console shows and ends every run"):
            check_console_exposure(settings, None)
    with pytest.raises(SettingsError, match=r"--console on 10\.0\.0\.5:8765: anyone who can reach it"):
        ServeSettings.load(http="10.0.0.5:8765", console=True, allow_anonymous=True)
    with pytest.raises(SettingsError, match=r"--console shows the runs a store holds: give --store URL, not none"):
        ServeSettings.load(http="127.0.0.1:8765", console=True, store="none")
    done = subprocess.run(
        [sys.executable, "-m", "branchc", "console", "--http", "10.0.0.5:8766", "--store", store.url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "error: --http 10.0.0.5:8766: the runs console shows" in done.stderr


def test_serve_http_mounts_the_console_behind_the_same_auth(served):
    base = f"{served.url}/console"
    with httpx.Client(follow_redirects=False, timeout=30) as http:
        assert http.get(f"{base}/").status_code == 303
        alice = http.get(f"{base}/", headers={"Authorization": f"Bearer {TOKENS['alice']}"})
        assert alice.status_code == 200 and alice.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert f'href="/console/runs/{served.ids["alice-survey"]}"' in alice.text
        assert served.ids["bob-survey"] not in alice.text
        assert 'href="/console/static/console.css"' in alice.text
        assert http.get(f"{base}/static/console.js").status_code == 200
        assert http.get(f"{base}/", headers={"Host": "evil.example"}).status_code == 421
        assert http.get(f"{served.url}/mcp").status_code != 404  # the MCP endpoint is where it was


def test_branchc_console_serves_a_store_on_its_own(served, store, tmp_path):
    from _bridge_support import free_port, listening

    port = free_port()
    command = [sys.executable, "-m", "branchc", "console", "--store", store.url, "--http", f"127.0.0.1:{port}"]
    command += ["--auth-tokens", str(served.tokens), "--operators", "ops"]
    with listening(command, port, {"BRANCHC_CACHE": str(served.cache)}):
        with httpx.Client(follow_redirects=False, timeout=30) as http:
            page = http.get(f"http://127.0.0.1:{port}/", headers={"Authorization": f"Bearer {TOKENS['ops']}"})
            assert page.status_code == 200 and len(listed(page)) == 5
            run = http.get(
                f"http://127.0.0.1:{port}/runs/{served.ids['alice-survey']}",
                headers={"Authorization": f"Bearer {TOKENS['ops']}"},
            )
            assert "started without --tools" in run.text and 'class="node waiting"' in run.text
