"""The runs console in a real browser: headless Chromium (Debian's `chromium`) driven by Selenium through Debian's
`chromium-driver`, against the console mounted in a real `branchc serve --http --console` subprocess whose store
holds real runs (tests/_console_support.py).

It signs in, filters the runs, opens a run and finds its wait highlighted in the graph, clicks cancel and fork and
checks the store afterwards (the run is cancelled and its finally ran once, in the server; the fork exists), and
checks basic accessibility at 1400x900 and at 390 px wide: every form control labelled, every text at 4.5:1 or more
against its background (from computed styles), keyboard focus visible on the actions. One browser serves the whole
module. Screenshots are kept in tests/artifacts/console/ (git-ignored; each path is printed); with
BRANCHC_DOCS_SCREENSHOT=PATH the run page at 1400x900 is also written there (the README's picture:
docs/console.png).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _bridge_support import KEYS
from _console_support import HOSTILE_NAME, TOKENS, serving

from branchc.store import open_store

CHROMIUM = next((found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None)
DRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").is_file() else None)
try:
    import selenium  # noqa: F401

    SELENIUM = True
except ImportError:
    SELENIUM = False

_missing = [
    what
    for what, there in (
        ("chromium (Debian: apt-get install chromium)", CHROMIUM),
        ("chromedriver (Debian: apt-get install chromium-driver)", DRIVER),
        ("selenium (pip install selenium, in the dev extra)", SELENIUM),
    )
    if not there
]
pytestmark = [
    pytest.mark.skipif(bool(_missing), reason=f"needs a real browser: {', '.join(_missing)} not installed"),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.usefixtures("state_key_in_env"),
]

ARTIFACTS = Path(__file__).parent / "artifacts" / "console"
SIZES = [(1400, 900), (390, 844)]
WAITING_STROKE = "rgb(26, 127, 55)"  # render.WAITING, #1a7f37


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Any]:
    with serving(tmp_path_factory.mktemp("console_browser")) as done:
        yield done


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Iterator[Any]:
    """One headless Chromium for the module, through Debian's chromium-driver (never a driver Selenium fetches)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium_profile')}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SE_OFFLINE", "true")  # Selenium Manager: nothing is downloaded, whatever happens
        browser = webdriver.Chrome(service=Service(DRIVER), options=options)
    browser.set_page_load_timeout(60)
    browser.implicitly_wait(10)  # an element a page's script adds may come a moment after the page
    yield browser
    browser.quit()


def viewport(driver: Any, width: int, height: int) -> None:
    """The page's viewport exactly `width` x `height` CSS pixels (a phone's, with its viewport meta, under 500)."""
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 500}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)


def shot(driver: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def console(served: Any) -> str:
    return f"{served.url}/console"


def sign_in(driver: Any, served: Any, who: str) -> None:
    """Signed in as `who`, through the login form (a session cookie), whoever was before."""
    from selenium.webdriver.common.by import By

    driver.delete_all_cookies()
    driver.get(f"{console(served)}/login")
    label = driver.find_element(By.CSS_SELECTOR, "label[for=token]")
    assert label.text == "Access token"
    driver.find_element(By.ID, "token").send_keys(TOKENS[who])
    navigate(driver, driver.find_element(By.CSS_SELECTOR, "form.stack button[type=submit]"))
    assert driver.find_element(By.CLASS_NAME, "who-name").text == who


def navigate(driver: Any, element: Any, accept: bool | None = None) -> None:
    """Click `element`, which loads another page (a form's submit, a link), and wait until that page is in; with
    `accept`, the click opens a confirm first, accepted or dismissed (a dismissed one loads nothing)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    old = driver.find_element(By.TAG_NAME, "html")
    element.click()
    if accept is not None:
        confirm = WebDriverWait(driver, 30).until(expected_conditions.alert_is_present())
        if not accept:
            confirm.dismiss()
            return
        confirm.accept()
    WebDriverWait(driver, 60).until(expected_conditions.staleness_of(old))
    WebDriverWait(driver, 60).until(lambda d: d.execute_script("return document.readyState") == "complete")


def listed(driver: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    links = driver.find_elements(By.CSS_SELECTOR, "a.run-link")
    return [link.get_attribute("href").rsplit("/", 1)[1] for link in links]


def no_browser_errors(driver: Any) -> None:
    """Nothing the console's pages did was refused or failed: no CSP violation, no script error, no 404."""
    severe = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert severe == [], severe


def records(served: Any) -> dict[str, Any]:
    store = open_store(f"sqlite:///{served.db}", KEYS)
    try:
        return {record.run_id: record for record in store.list()}
    finally:
        store.close()


# -- looking -------------------------------------------------------------------------------------------------


def test_sign_in_filter_and_open_a_run_whose_wait_is_highlighted(served, driver):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    viewport(driver, 1400, 900)
    sign_in(driver, served, "alice")
    ids = served.ids
    alices = ("alice-survey", "alice-hostile", "alice-triage", "alice-done")
    assert sorted(listed(driver)) == sorted(ids[name] for name in alices)
    Select(driver.find_element(By.ID, "f-tool")).select_by_value("triage")
    navigate(driver, driver.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]"))
    assert "tool=triage" in driver.current_url and listed(driver) == [ids["alice-triage"]]
    Select(driver.find_element(By.ID, "f-tool")).select_by_value("survey")
    Select(driver.find_element(By.ID, "f-status")).select_by_value("waiting")
    navigate(driver, driver.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]"))
    assert sorted(listed(driver)) == sorted([ids["alice-survey"], ids["alice-hostile"]])
    shot(driver, "runs-filtered-1400x900")
    navigate(driver, driver.find_element(By.CSS_SELECTOR, f'a.run-link[href$="/runs/{ids["alice-survey"]}"]'))
    # where it waits: the state is outlined in the graph, and pointing at the wait marks it there
    (node,) = driver.find_elements(By.CSS_SELECTOR, "[data-graph] g.node.waiting")
    outline = node.find_element(By.CSS_SELECTOR, "path")
    assert outline.value_of_css_property("stroke") == WAITING_STROKE
    assert float(outline.value_of_css_property("stroke-width").removesuffix("px")) >= 3
    assert "waits here: branch 0" in node.text
    wait = driver.find_element(By.CSS_SELECTOR, f'.wait-item[data-node="{node.get_attribute("id")}"]')
    assert "try:body/elicit:approve" in wait.text
    ActionChains(driver).move_to_element(wait).perform()
    assert "highlight" in node.get_attribute("class")
    assert "verdict = yield ctx.elicit" in driver.find_element(By.ID, "state-panel").text
    assert re.fullmatch(r"[0-9a-f]{32}", driver.find_element(By.ID, "trace-id").text)
    history = driver.find_elements(By.CSS_SELECTOR, "table.history tbody tr")
    assert [row.find_element(By.CSS_SELECTOR, "td").text for row in history] == ["#2", "#1", "#0"]
    ActionChains(driver).move_by_offset(-400, 0).perform()  # the pointer off the wait, for the picture
    driver.execute_script("window.scrollTo(0, 0)")
    path = shot(driver, "run-1400x900")
    if os.environ.get("BRANCHC_DOCS_SCREENSHOT"):
        shutil.copyfile(path, os.environ["BRANCHC_DOCS_SCREENSHOT"])
    no_browser_errors(driver)


def test_a_runs_hostile_answers_show_as_text_and_never_run(served, driver):
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    viewport(driver, 1400, 900)
    sign_in(driver, served, "alice")
    driver.get(f"{console(served)}/runs/{served.ids['alice-hostile']}")
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert  # noqa: B018  # an alert() in an answer that ran would be open now
    page = driver.find_element(By.TAG_NAME, "main").text
    assert HOSTILE_NAME in page  # shown, as the text it is
    scripts = driver.execute_script("return [...document.scripts].map(s => s.src ? new URL(s.src).pathname : s.type)")
    assert scripts == ["/console/static/console.js", "application/json"]
    assert driver.find_elements(By.TAG_NAME, "img") == []
    no_browser_errors(driver)


# -- acting ----------------------------------------------------------------------------------------------------


def test_fork_and_cancel_from_the_run_page_change_the_store(served, driver):
    from selenium.webdriver.common.by import By

    viewport(driver, 1400, 900)
    sign_in(driver, served, "alice")
    run = served.ids["alice-triage"]
    page = f"{console(served)}/runs/{run}"
    driver.get(page)
    navigate(driver, driver.find_element(By.ID, "fork"))
    assert "This run is a fork" in driver.find_element(By.CSS_SELECTOR, ".message.ok").text
    fork = driver.current_url.split("/runs/")[1].split("?")[0]
    stored = records(served)
    assert fork != run and stored[fork].owner == "alice" and stored[fork].status == "waiting"
    assert stored[fork].meta.extra["forked_from"] == {"run": run, "k": 0}
    shot(driver, "fork-1400x900")
    # cancelling asks first: no is no
    driver.get(page)
    navigate(driver, driver.find_element(By.ID, "cancel"), accept=False)
    assert records(served)[run].status == "waiting" and served.marks("alice-triage") == []
    navigate(driver, driver.find_element(By.ID, "cancel"), accept=True)
    assert "The run is cancelled" in driver.find_element(By.CSS_SELECTOR, ".message.ok").text
    button = driver.find_element(By.CSS_SELECTOR, ".run-actions button.danger")
    assert button.get_attribute("disabled") is not None
    assert "the run has ended (cancelled)" in driver.find_element(By.ID, "cancel-why").text
    assert records(served)[run].status == "cancelled"
    assert served.marks("alice-triage") == ["triage"]  # its finally ran once, in the server
    assert records(served)[fork].status == "waiting"  # the fork is its own run
    shot(driver, "cancelled-1400x900")
    no_browser_errors(driver)


# -- accessibility ---------------------------------------------------------------------------------------------

_TEXTS = """
const out = [];
function background(element) {
  for (let node = element; node; node = node.parentElement) {
    const color = getComputedStyle(node).backgroundColor;
    if (color && !/rgba\\(.*, 0\\)$/.test(color) && color !== "transparent") return color;
  }
  return "rgb(255, 255, 255)";
}
for (const element of document.querySelectorAll("body *")) {
  if (element.closest("svg, script, style, option")) continue;
  const own = [...element.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
  if (!own && element.tagName !== "SELECT") continue;
  const box = element.getBoundingClientRect();
  const style = getComputedStyle(element);
  if (box.width <= 1 || box.height <= 1 || style.visibility === "hidden" || style.display === "none") continue;
  out.push([element.tagName + "." + element.className, element.textContent.trim().slice(0, 40),
            style.color, background(element)]);
}
return out;
"""

_UNLABELLED = """
return [...document.querySelectorAll("input:not([type=hidden]), select, textarea, button")].filter(control => {
  if (control.getAttribute("aria-label") || control.getAttribute("aria-labelledby")) return false;
  if (control.tagName === "BUTTON") return !control.textContent.trim();
  return ![...control.labels].some(label => label.textContent.trim());
}).map(control => control.outerHTML.slice(0, 120));
"""


def _rgb(text: str) -> tuple[float, ...]:
    return tuple(float(part) for part in re.findall(r"[\d.]+", text)[:3])


def contrast(foreground: str, background: str) -> float:
    """WCAG 2 contrast ratio of two computed colours (rgb(...))."""

    def luminance(color: tuple[float, ...]) -> float:
        channels = [c / 255 for c in color]
        linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    light, dark = sorted((luminance(_rgb(foreground)), luminance(_rgb(background))), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def check_page(driver: Any) -> None:
    """Every form control labelled; every text at 4.5:1 or more; nothing wider than the viewport."""
    assert driver.execute_script(_UNLABELLED) == []
    texts = driver.execute_script(_TEXTS)
    assert len(texts) > 10
    low = [(where, text, fg, bg, round(contrast(fg, bg), 2)) for where, text, fg, bg in texts if contrast(fg, bg) < 4.5]
    assert low == [], low
    width = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1] + 1, width  # no sideways scrolling of the page (the graph scrolls in its box)


def tab_to(driver: Any, ident: str, most: int = 60) -> Any:
    """Press Tab until the element `ident` has the focus; it."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    for _ in range(most):
        ActionChains(driver).send_keys(Keys.TAB).perform()
        focused = driver.switch_to.active_element
        if focused.get_attribute("id") == ident:
            return focused
    raise AssertionError(f"#{ident} never got the focus in {most} presses of Tab")


@pytest.mark.parametrize(("width", "height"), SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_labels_contrast_and_visible_keyboard_focus(served, driver, width, height):
    from selenium.webdriver.common.by import By

    viewport(driver, width, height)
    sign_in(driver, served, "alice")
    check_page(driver)
    shot(driver, f"runs-{width}x{height}")
    driver.get(f"{console(served)}/runs/{served.ids['alice-survey']}")
    check_page(driver)
    for ident in ("cancel", "fork"):
        focused = tab_to(driver, ident)
        assert driver.execute_script("return arguments[0].matches(':focus-visible')", focused)
        style = focused.value_of_css_property
        assert style("outline-style") == "solid" and float(style("outline-width").removesuffix("px")) >= 2
        assert contrast(style("outline-color"), "rgb(246, 248, 250)") >= 3  # against the page: a non-text contrast
        driver.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
    tab_to(driver, "cancel")
    shot(driver, f"run-focus-{width}x{height}")
    driver.get(f"{console(served)}/tools/survey")
    check_page(driver)
    assert driver.find_elements(By.CSS_SELECTOR, "[data-graph] g.node.waiting")
    shot(driver, f"tool-{width}x{height}")
    no_browser_errors(driver)
