"""The web console in a real browser: Debian's headless Chromium driven by Playwright (its
Python package only, launched on the system browser; no browser is downloaded).

Each test signs in (by keyboard), uses a page as a person would, and writes a screenshot of
it to ``$DOCGRAPH_TEST_ARTIFACTS/console`` (else a temporary folder). Every request the
browser makes must go to the docgraph server itself: the console needs no network.
Skipped when Chromium or Playwright is absent (``.ci/run`` installs both and, with
``DOCGRAPH_REQUIRE_SERVICES=1``, turns such a skip into a failure).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backend_graphs import BACKEND_NAMES
from tests.console_helpers import served_console, tagged_database
from tests.pg import pgvector_server  # noqa: F401  (fixture of the postgres backend)
from tests.serve.test_mcp_tools import backend_for

#: Debian's Chromium, found on PATH (``.ci/run``'s pass without system programs hides it).
CHROMIUM = shutil.which("chromium") or "chromium"
#: Where screenshots go (read at import: the tests' own fixtures clear DOCGRAPH_* variables).
ARTIFACTS = os.environ.get("DOCGRAPH_TEST_ARTIFACTS")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run",
                 "--disable-dev-shm-usage"]  # containers often have a tiny /dev/shm


def _browser_missing() -> str | None:
    if not Path(CHROMIUM).is_file():
        return ("needs the chromium program, not found on PATH: apt-get install chromium "
                "chromium-driver (.ci/run does)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    return None


@pytest.fixture(scope="module", params=BACKEND_NAMES)
def served(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    missing = _browser_missing()
    if missing:
        pytest.skip(missing)
    root = tmp_path_factory.mktemp("console-browser")
    with backend_for(request, root) as backend, served_console(root, backend) as running:
        running["backend"] = request.param
        yield running


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not ARTIFACTS:
        return tmp_path_factory.mktemp("console-screens")
    folder = Path(ARTIFACTS) / "console"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser(served: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Any]:
    """Chromium with a fresh profile, for this module."""
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        context.set_default_timeout(30_000)
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def page(browser: Any, served: dict[str, Any], artifacts: Path,
         request: pytest.FixtureRequest) -> Iterator[Any]:
    """A signed-out tab; afterwards every request it made must have gone to docgraph, and
    its last view is saved as a screenshot."""
    browser.clear_cookies()
    tab = browser.new_page()
    seen: list[str] = []
    tab.on("request", lambda r: seen.append(r.url))
    yield tab
    tab.screenshot(path=str(artifacts / f"{request.node.name}.png"), full_page=True)
    tab.close()
    foreign = [u for u in seen if not u.startswith(served["url"] + "/")]
    assert not foreign, f"the console reached beyond docgraph: {foreign}"


def sign_in(page: Any, served: dict[str, Any], who: str = "root") -> None:
    """Sign in by keyboard: the token field has the focus; type the token, press Enter."""
    page.goto(served["url"] + "/console/status")
    assert page.url.endswith("/console/login")
    # autofocus is applied at the page's next rendering step, not by the time goto returns;
    # waited for by a locator assertion: a string predicate is polled through eval in the
    # page, which the console's CSP (no 'unsafe-eval') refuses once the poll runs there
    from playwright.sync_api import expect

    expect(page.locator("#token")).to_be_focused(timeout=5000)
    page.keyboard.type(served["tokens"][who])
    navigate(page, lambda: page.keyboard.press("Enter"))


def navigate(page: Any, action: Any) -> None:
    """Do ``action`` (a click, a key) and wait for the page it leads to."""
    with page.expect_navigation():
        action()


def test_sign_in_and_move_between_pages_by_keyboard(page, served, artifacts):
    sign_in(page, served)
    assert page.url.endswith("/console/status")
    assert page.inner_text("h1") == "Status"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    page.keyboard.press("Tab")  # the skip link skipped the navigation
    assert page.evaluate("document.activeElement.textContent") == "Refresh now"
    page.goto(served["url"] + "/console/status")
    page.keyboard.press("Tab")  # the skip link, then the navigation in order
    labels = []
    for _ in range(7):
        page.keyboard.press("Tab")
        labels.append(page.evaluate("document.activeElement.textContent"))
    assert labels == ["Status", "Sources", "Tags", "Settings", "Traces and audit",
                      "Playground", "Graph"]
    for _ in range(5):
        page.keyboard.press("Shift+Tab")
    navigate(page, lambda: page.keyboard.press("Enter"))  # on "Sources"
    page.wait_for_url(re.compile(r".*/console/sources$"))
    assert page.get_attribute('nav a[aria-current="page"]', "href") == "/console/sources"
    assert page.inner_text("h1") == "Sources"
    # Every form field has a label.
    unlabeled = page.evaluate(
        "[...document.querySelectorAll('input:not([type=hidden]), select')]"
        ".filter(e => !e.labels || e.labels.length === 0).map(e => e.name)")
    assert unlabeled == []
    page.screenshot(path=str(artifacts / f"sources-{served['backend']}.png"), full_page=True)


def test_add_a_folder_after_seeing_its_normalized_urn_then_remove_it(page, served, tmp_path):
    folder = tmp_path / "handbook"
    folder.mkdir()
    (folder / "intro.md").write_text("# Handbook\n\nHow to reboot the Tern T3.\n")
    sign_in(page, served)
    page.goto(served["url"] + "/console/sources")
    page.fill("#urn", f"{tmp_path}/./handbook/")
    page.fill("#domain", "handbook")
    navigate(page, lambda: page.click("#check-folder"))
    assert page.inner_text("#normalized-urn") == f"file://{folder}"
    navigate(page, lambda: page.click("#confirm-add"))
    assert "Done:" in page.inner_text("main")
    assert f"file://{folder}" in page.inner_text("#folders")
    # The same folder again in the same domain: the duplicate error, nothing saved.
    page.fill("#urn", str(folder))
    page.fill("#domain", "handbook")
    navigate(page, lambda: page.click("#check-folder"))
    assert "already registered in domain 'handbook'" in page.inner_text("#preview-error")
    assert page.locator("#confirm-add").count() == 0
    # Remove it: the confirmation is dismissed once (nothing happens), then accepted.
    button = page.get_by_role("button", name=f"Remove file://{folder} from domain handbook")
    page.once("dialog", lambda dialog: dialog.dismiss())
    button.click()
    assert f"file://{folder}" in page.inner_text("#folders")
    page.once("dialog", lambda dialog: dialog.accept())
    navigate(page, button.click)
    assert "removed" in page.inner_text("main")
    assert f"file://{folder}" not in page.inner_text("#folders")


def test_tag_a_column_of_a_real_table_then_remove_the_tag(page, served, artifacts):
    graph = served["graph"]
    graph.sources.add_sql_source("desk", tagged_database(served))
    try:
        sign_in(page, served)
        page.goto(served["url"] + "/console/tags")
        assert "desk_tickets" in page.inner_text("main")
        page.select_option("#tag-column", "desk_tickets.body")
        page.fill("#tag-domain", "support")
        navigate(page, lambda: page.click("#set-tag-button"))
        assert "Done:" in page.inner_text("main")
        assert "natural_language" in page.inner_text("#tags")
        page.screenshot(path=str(artifacts / f"tags-{served['backend']}.png"), full_page=True)
        page.once("dialog", lambda dialog: dialog.accept())
        navigate(page, lambda: page.get_by_role(
            "button", name=re.compile(r"Remove natural_language from desk:")).click())
        assert "removed natural_language" in page.inner_text("main")
        assert page.locator("#tags").count() == 0
    finally:
        graph.sources.remove_sql_source("desk")


def test_browse_the_graph_from_an_entity_to_a_community_report(page, served, artifacts):
    sign_in(page, served)
    page.goto(served["url"] + "/console/graph")
    page.fill("#entity-query", "Nordhaven")
    navigate(page, lambda: page.press("#entity-query", "Enter"))
    navigate(page, lambda: page.click("#entities a >> nth=0"))
    assert "Neighbours of Nordhaven" in page.inner_text("main")
    assert page.locator("#neighbors tbody tr").count() > 0
    page.screenshot(path=str(artifacts / f"graph-{served['backend']}.png"), full_page=True)
    navigate(page, lambda: page.click("#communities a >> nth=0"))
    assert page.inner_text("#members")
    assert page.inner_text("#report")


def test_change_the_refresh_interval(page, served, artifacts):
    graph = served["graph"]
    before = graph.settings.refresh.interval_seconds
    sign_in(page, served)
    page.goto(served["url"] + "/console/settings")
    try:
        page.fill("#refresh-interval_seconds", "1200")
        navigate(page, lambda: page.click("#save-settings"))
        assert "changed refresh.interval_seconds = 1200.0" in page.inner_text("main")
        assert page.input_value("#refresh-interval_seconds") == "1200.0"
        assert graph.settings.refresh.interval_seconds == 1200
        page.fill("#refresh-interval_seconds", "soon")
        navigate(page, lambda: page.click("#save-settings"))
        assert "nothing changed" in page.inner_text("main")
        page.screenshot(path=str(artifacts / f"settings-{served['backend']}.png"),
                        full_page=True)
    finally:
        graph.settings.refresh.interval_seconds = before


def test_set_then_remove_the_chat_model(page, served, artifacts):
    graph = served["graph"]
    sign_in(page, served)
    page.goto(served["url"] + "/console/settings")
    try:
        assert "No chat model" in page.inner_text("#chat-state")
        page.fill("#chat-base-url", "http://127.0.0.1:9/v1")
        page.fill("#chat-model", "local-7b")
        navigate(page, lambda: page.click("#chat-save"))
        assert "set chat model 'local-7b'" in page.inner_text("main")
        assert "local-7b" in page.inner_text("#chat-state")
        assert page.input_value("#chat-model") == "local-7b"
        assert graph.chat_model is not None
        page.screenshot(path=str(artifacts / f"settings-chat-{served['backend']}.png"),
                        full_page=True)
        navigate(page, lambda: page.click("#chat-clear"))
        assert "No chat model" in page.inner_text("#chat-state")
        assert graph.chat_model is None
    finally:
        graph.admin.update({"llm.base_url": None, "llm.model": None}, is_admin=True)


def test_refresh_now_and_see_the_status_change(page, served):
    sign_in(page, served)
    navigate(page, lambda: page.click("#refresh-now"))
    assert "refresh started" in page.inner_text("main")
    deadline = time.monotonic() + 120
    while "finished" not in page.inner_text("#console-refresh"):
        assert time.monotonic() < deadline, page.inner_text("main")
        time.sleep(1)
        page.reload()
    text = page.inner_text("main")
    assert "Phases of the last build" in text and "crawl" in text
    assert "engineering" in text and "support" in text


def test_the_playground_shows_what_each_caller_may_see(page, served, artifacts):
    sign_in(page, served)
    page.goto(served["url"] + "/console/playground")
    page.fill("#user", "alice")
    page.fill("#query", "Tern T3 E-417")
    navigate(page, lambda: page.press("#query", "Enter"))
    assert page.inner_text("#namespaces") == "engineering, support"
    alice_blocks = page.locator("#blocks > li").count()
    assert alice_blocks > 0
    assert "Quality score" in page.inner_text("#blocks")
    assert "Relevance level" in page.inner_text("#blocks")
    page.screenshot(path=str(artifacts / f"playground-{served['backend']}.png"),
                    full_page=True)
    page.fill("#user", "bob")
    page.fill("#role", "support")
    page.check('input[name="tool"][value="search_documents"]')
    navigate(page, lambda: page.click("#run"))
    assert page.inner_text("#namespaces") == "support"
    namespaces = page.locator("#blocks .ns").all_inner_texts()
    assert namespaces and set(namespaces) == {"support"}
    page.fill("#user", "mallory")
    page.fill("#role", "")
    navigate(page, lambda: page.click("#run"))
    assert "access denied" in page.inner_text("#result-error")


def test_open_a_trace_from_the_playground(page, served, artifacts):
    sign_in(page, served)
    page.goto(served["url"] + "/console/playground")
    page.check('input[name="tool"][value="search_documents"]')
    page.fill("#user", "alice")
    page.fill("#query", "Nordhaven Logistics E-417")
    navigate(page, lambda: page.click("#run"))
    navigate(page, lambda: page.click("text=Open the trace of this search"))
    page.wait_for_url(re.compile(r".*/console/traces/[0-9a-f]+$"))
    text = page.inner_text("main")
    for part in ("Provenance of the returned chunks", "Candidates per lane", "Timings",
                 "Query entities"):
        assert part in text
    # The share bars are drawn by the console's own script (the CSP allows nothing else).
    widths = page.eval_on_selector_all(".bar-fill", "bars => bars.map(b => b.style.width)")
    assert widths and all(w.endswith("%") for w in widths)
    page.goto(served["url"] + "/console/traces")
    assert "retrieve:vector_first" in page.inner_text("#audit")
    assert "console:playground" in page.inner_text("#audit")
    assert page.locator("#lane-chart rect").count() > 1  # the frame and the share segments
    page.click("text=Lane shares as a table")  # the chart's numbers as text
    assert "%" in page.inner_text("#lane-shares")
    page.screenshot(path=str(artifacts / f"traces-{served['backend']}.png"), full_page=True)


def test_a_non_admin_gets_nothing_and_a_forged_csrf_token_is_refused(page, served):
    sign_in(page, served, "alice")
    assert page.url.endswith("/console/login")
    assert "is not a console admin" in page.inner_text("#login-error")
    page.goto(served["url"] + "/console/playground")
    assert page.url.endswith("/console/login")  # still nothing but the sign-in page
    sign_in(page, served)

    def refreshes() -> int:
        return sum(r["operation"] == "console:refresh"
                   for r in served["graph"].audit_store.recent(1000))

    before = refreshes()
    page.evaluate("document.querySelector('form[action$=\"/status/refresh\"] "
                  "input[name=csrf]').value = 'forged'")
    with page.expect_response(lambda r: r.url.endswith("/console/status/refresh")) as answer:
        page.click("#refresh-now")
    assert answer.value.status == 403
    assert "CSRF token is missing or wrong" in page.inner_text("main")
    page.goto(served["url"] + "/console/status")
    page.evaluate("document.querySelector('form[action$=\"/status/refresh\"] "
                  "input[name=csrf]').remove()")
    with page.expect_response(lambda r: r.url.endswith("/console/status/refresh")) as answer:
        page.click("#refresh-now")
    assert answer.value.status == 403
    assert refreshes() == before  # nothing ran


#: Each label of the settings form with the box of its own control, and the next field's
#: label: ``for`` names the control; the label sits left of it on its row, or above it;
#: the next label starts below this control (no label shares a line with another's box).
SETTINGS_BOXES = """
() => [...document.querySelectorAll('#settings-form label')].map(label => {
  const control = document.getElementById(label.htmlFor);
  const box = e => { const r = e.getBoundingClientRect();
                     return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; };
  return {key: label.htmlFor, label: box(label),
          control: control ? box(control) : null,
          inside: control ? label.parentElement.contains(control) : false,
          help: control && control.getAttribute('aria-describedby')
                ? (document.getElementById(control.getAttribute('aria-describedby')) || {})
                  .textContent || '' : ''};
})
"""


def test_settings_fields_are_laid_out_label_input_help_for_the_backend_in_use(
        page, served, artifacts):
    sign_in(page, served)
    page.goto(served["url"] + "/console/settings")
    page.screenshot(path=str(artifacts / f"settings-layout-{served['backend']}.png"),
                    full_page=True)
    fields = page.evaluate(SETTINGS_BOXES)
    assert len(fields) > 10
    for field, after in zip(fields, [*fields[1:], None], strict=True):
        label, control = field["label"], field["control"]
        assert control is not None, f"label for={field['key']!r} names no control"
        assert field["inside"], field  # label and control are one field's
        beside = (label["right"] <= control["left"] + 1
                  and label["top"] < control["bottom"] and label["bottom"] > control["top"])
        above = label["bottom"] <= control["top"] + 1
        assert beside or above, field
        if after is not None:
            assert after["label"]["top"] >= control["bottom"] - 1, (field, after)
    assert all(f["help"].strip() for f in fields), [f["key"] for f in fields
                                                     if not f["help"].strip()]
    shown = {f["key"] for f in fields}
    if served["backend"] == "postgres":
        assert {"store-url", "store-pg_ef_search"} <= shown and "store-path" not in shown
    else:
        assert "store-path" in shown
        assert not shown & {"store-url", "store-pg_ef_search"}, shown
    assert not shown & {"store-milvus_uri", "store-milvus_collection", "store-milvus_token_env"}
    assert "store.milvus_uri" in page.inner_text("#hidden-store")  # named as left out


def test_a_bad_setting_is_explained_by_key_problem_and_expectation(page, served):
    graph = served["graph"]
    before = graph.settings.refresh.interval_seconds
    sign_in(page, served)
    page.goto(served["url"] + "/console/settings")
    page.fill("#refresh-interval_seconds", "soon")
    navigate(page, lambda: page.click("#save-settings"))
    said = page.inner_text("main")
    assert ('nothing changed: refresh.interval_seconds: "soon" is not accepted, expected '
            'a number') in said, said
    assert "validation error" not in said and "pydantic" not in said
    assert "RefreshSettings" not in said and "input_value" not in said
    assert graph.settings.refresh.interval_seconds == before


def test_an_entitys_neighbours_show_first_strongest_first(page, served, artifacts):
    from tests.serve.console.test_console import audit_operations

    sign_in(page, served)
    page.goto(served["url"] + "/console/graph")  # every entity: a long table
    assert page.locator("#entities tbody tr").count() >= 10
    chosen = max(range(page.locator("#entities tbody tr").count()),
                 key=lambda i: int(page.inner_text(
                     f"#entities tbody tr >> nth={i} >> td >> nth=3")))  # most mentioned
    audited = audit_operations(served)
    navigate(page, lambda: page.click(f"#entities tbody tr >> nth={chosen} >> a"))
    assert page.evaluate("window.scrollY") == 0
    height = page.evaluate("window.innerHeight")
    panel = page.locator("section", has=page.locator("#neighbors-heading")).bounding_box()
    assert panel is not None and panel["y"] < height, (panel, height)
    table = page.locator("#neighbors").bounding_box()
    assert table is not None and table["y"] < height, (table, height)
    weights = [float(text) for text in page.locator(
        "#neighbors tbody tr td:nth-child(4)").all_inner_texts()]
    assert len(weights) >= 2, weights
    assert weights == sorted(weights, reverse=True), weights
    page.screenshot(path=str(artifacts / f"graph-neighbours-{served['backend']}.png"))
    assert audit_operations(served) == audited  # viewing pages is not audited


def test_a_search_result_url_opens_its_passage_after_sign_in(page, served, artifacts):
    tools = served["console"].tools
    tools.governance.base_url = served["url"]  # the links name this server
    from docgraph.governance import Caller

    results = tools.call("search", Caller("alice"),
                         {"query": "Roost gateway pushes firmware rollout"})["results"]
    result = next(r for r in results if r["id"].startswith("eng/firmware.md#chunk-"))
    anchor = "chunk-" + result["id"].rpartition("#chunk-")[2]
    blocked: list[str] = []
    page.on("console", lambda m: blocked.append(m.text)
            if "Content Security Policy" in m.text else None)
    page.goto(result["url"])  # signed out: the sign-in form, which comes back here
    assert "/console/login?next=" in page.url
    page.wait_for_function("document.activeElement && document.activeElement.id === 'token'",
                           timeout=5000)
    page.keyboard.type(served["tokens"]["root"])
    navigate(page, lambda: page.keyboard.press("Enter"))
    assert page.url == result["url"]
    assert page.evaluate("document.querySelector(':target').id") == anchor
    assert page.get_attribute(f"#{anchor}", "aria-current") == "location"
    assert result["id"] in page.inner_text(f"#{anchor}")
    in_view = page.evaluate(f"(() => {{ const r = document.getElementById('{anchor}')"
                            ".getBoundingClientRect(); return r.top >= 0 && "
                            "r.top < window.innerHeight; })()")
    assert in_view and not blocked, blocked
    page.screenshot(path=str(artifacts / f"document-{served['backend']}.png"), full_page=True)
