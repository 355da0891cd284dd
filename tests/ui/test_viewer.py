"""The live session viewer at /ui/, as a person sees it in a real browser (headless Chromium).

Each test asserts what is on screen: a new session appears in the list without a reload; while a
turn runs, its tool call (with its input), then the result and the agent's text appear in the
timeline; with a key configured the page shows a sign-in prompt and no data until the key is
entered. The page is never reloaded while we wait: a marker set in the page must survive.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from conftest import Gateway, artifacts


def wait(driver: WebDriver, what: str, check: Callable[[], Any], timeout: float = 15) -> Any:
    """Waits until `check()` is truthy (a vanished element counts as not yet), else fails with `what`."""

    def attempt(_: WebDriver) -> Any:
        try:
            return check()
        except StaleElementReferenceException:
            return None

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(attempt, message=f"not seen within {timeout}s: {what}")


def text(driver: WebDriver, css: str) -> str:
    return "\n".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, css))


def shown(driver: WebDriver, element_id: str) -> bool:
    return driver.find_element(By.ID, element_id).is_displayed()


def session_row(driver: WebDriver, session_id: str) -> str:
    return text(driver, f'#session-rows tr[data-session="{session_id}"]')


def console_problems(driver: WebDriver) -> list[str]:
    """Console errors, CSP violations among them (a blocked inline script or style shows here).
    The browser's own notes on refused reads (401, expected without a key) and on the favicon
    it asks for by itself are not the page's problems."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"
            and "favicon.ico" not in e["message"] and "status of 401" not in e["message"]]


def test_the_page_is_served_with_strict_headers(spawn_gateway: Callable[..., Gateway]) -> None:
    gw = spawn_gateway()
    status, headers, _ = gw.request("GET", "/ui", key=False)
    assert status == 308 and headers["location"] == "/ui/"
    for path, content_type in [("/ui/", "text/html"), ("/ui/viewer.js", "text/javascript"),
                               ("/ui/api.js", "text/javascript"), ("/ui/viewer.css", "text/css")]:
        status, headers, body = gw.request("GET", path, key=False)
        assert status == 200 and body, path
        assert headers["content-type"].startswith(content_type), (path, headers["content-type"])
        csp = headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp, csp
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"
        assert headers["cache-control"] == "no-cache"
    assert gw.request("GET", "/ui/nothing.js", key=False)[0] == 404


def test_a_session_and_its_turn_appear_live(spawn_gateway: Callable[..., Gateway], browser: WebDriver) -> None:
    gw = spawn_gateway()
    agent_id, env_id = gw.agent_and_environment()
    browser.get(gw.url + "/ui/")
    # Keyless, and the page is the gateway's own (same origin, loopback): no prompt, the list shows.
    wait(browser, "the session list", lambda: shown(browser, "viewer"))
    assert not shown(browser, "sign-in")
    browser.execute_script("window.sameDocument = true")

    # (1) A session made through the API appears in the list by itself.
    session = gw.api("POST", "/v1/sessions", {"agent": agent_id, "environment_id": env_id,
                                              "title": "viewer test session"})
    sid = session["id"]
    row = wait(browser, "the new session in the list", lambda: session_row(browser, sid))
    assert "viewer test session" in row and "idle" in row and "viewer-agent" in row and "native" in row, row

    # Open it; its stream goes live.
    wait(browser, "the session link", lambda: browser.find_element(
        By.CSS_SELECTOR, f'#session-rows tr[data-session="{sid}"] a').click() or True)
    wait(browser, "the stream live", lambda: browser.find_element(By.ID, "stream-state").text == "live")
    assert browser.find_element(By.ID, "session-id").text == sid

    # Record whether the agent's text was shown as streaming (from deltas) before its final form.
    # The fake model streams without pauses, so the deltas and the final message may land in one
    # read: the mutation records (old class values) still show the streaming state existed.
    browser.execute_script("""
        window.sawStreaming = false;
        new MutationObserver((records) => {
          for (const r of records) {
            const was = r.type === 'attributes' && (r.oldValue || '').split(' ').includes('streaming');
            if (was || r.target.closest?.('li.agent.streaming')) window.sawStreaming = true;
          }
        }).observe(document.getElementById('timeline'), {subtree: true, childList: true, attributes: true,
                                                         attributeOldValue: true, characterData: true});
    """)

    # (2) A turn whose tool call takes 5 s: the call and its input show while it runs.
    gw.say(sid, 'tool:bash {"command": "sleep 5; echo viewer-ok"}')
    call = '#timeline li[data-type="agent.tool_use"]'
    wait(browser, "the tool call with its input", lambda: "sleep 5; echo viewer-ok" in text(browser, call))
    assert "running" in text(browser, call)
    assert not browser.find_elements(By.CSS_SELECTOR, f"{call} pre.tool-result"), "result before the tool ran"
    assert "done:" not in text(browser, '#timeline li[data-type="agent.message"]')
    assert "tool:bash" in text(browser, '#timeline li[data-type="user.message"]')
    # The list follows the turn too.
    wait(browser, "the session running in the list", lambda: "running" in session_row(browser, sid), timeout=4.5)

    # Then the result, then the agent's text, in the same page.
    wait(browser, "the tool result", lambda: "viewer-ok" in text(browser, f"{call} pre.tool-result"))
    wait(browser, "the agent's reply", lambda: "done: viewer-ok" in text(
        browser, '#timeline li[data-type="agent.message"]:not(.streaming)'))
    wait(browser, "the turn ending", lambda: "idle" in text(browser, '#timeline li[data-type="session.status_idle"]'))
    assert browser.execute_script("return window.sawStreaming"), "the agent's text never showed as it streamed"
    assert browser.execute_script("return window.sameDocument") is True, "the page was reloaded"
    order = [li.get_attribute("data-type") for li in browser.find_elements(By.CSS_SELECTOR, "#timeline li")]
    assert order.index("user.message") < order.index("agent.tool_use") < order.index("agent.message"), order
    # The turn's usage, just before its end.
    assert order.index("agent.message") < order.index("session.usage") < order.index("session.status_idle"), order
    assert "usage so far:" in text(browser, '#timeline li[data-type="session.usage"]')

    wait(browser, "the session idle in the list", lambda: "idle" in session_row(browser, sid), timeout=5)
    browser.save_screenshot(str(artifacts() / "viewer.png"))
    assert console_problems(browser) == []


def test_the_list_filters_by_agent_and_status(spawn_gateway: Callable[..., Gateway], browser: WebDriver) -> None:
    gw = spawn_gateway()
    first_agent, env_id = gw.agent_and_environment()
    second_agent = gw.api("POST", "/v1/agents", {"name": "other-agent", "model": "claude-opus-4-7"})["id"]
    first = gw.api("POST", "/v1/sessions", {"agent": first_agent, "environment_id": env_id})["id"]
    second = gw.api("POST", "/v1/sessions", {"agent": second_agent, "environment_id": env_id})["id"]
    browser.get(gw.url + "/ui/")
    wait(browser, "both sessions", lambda: session_row(browser, first) and session_row(browser, second))
    agents = Select(browser.find_element(By.ID, "filter-agent"))
    wait(browser, "the agents to filter by", lambda: second_agent in [o.get_attribute("value") for o in agents.options])
    agents.select_by_value(second_agent)
    wait(browser, "only the other agent's session", lambda: not session_row(browser, first))
    assert "other-agent" in session_row(browser, second)
    status = Select(browser.find_element(By.ID, "filter-status"))
    status.select_by_value("running")
    wait(browser, "no running session", lambda: not session_row(browser, second))
    assert "No sessions match" in browser.find_element(By.ID, "list-note").text
    status.select_by_value("idle")
    agents.select_by_value("")
    wait(browser, "both idle sessions again", lambda: session_row(browser, first) and session_row(browser, second))


def test_a_reloaded_page_shows_the_history_once(spawn_gateway: Callable[..., Gateway], browser: WebDriver) -> None:
    gw = spawn_gateway()
    agent_id, env_id = gw.agent_and_environment()
    sid = gw.api("POST", "/v1/sessions", {"agent": agent_id, "environment_id": env_id})["id"]
    # Markup in a message is shown as the text it is, never run.
    markup = '<img src=x onerror="window.pwned = 1">'
    gw.say(sid, f"hello viewer {markup}")
    gw.wait_idle(sid)
    browser.get(f"{gw.url}/ui/#{sid}")
    wait(browser, "the stream live", lambda: browser.find_element(By.ID, "stream-state").text == "live")
    wait(browser, "the history", lambda: f"echo: hello viewer {markup}" in text(
        browser, '#timeline li[data-type="agent.message"]'))
    assert markup in text(browser, '#timeline li[data-type="user.message"]')
    assert not browser.find_elements(By.CSS_SELECTOR, "#timeline img")
    assert browser.execute_script("return window.pwned") is None
    time.sleep(1)
    assert len(browser.find_elements(By.CSS_SELECTOR, '#timeline li[data-type="user.message"]')) == 1
    assert len(browser.find_elements(By.CSS_SELECTOR, '#timeline li[data-type="agent.message"]')) == 1
    # The next turn arrives on the same stream.
    gw.say(sid, "second message")
    wait(browser, "the second reply", lambda: "echo: second message" in text(
        browser, '#timeline li[data-type="agent.message"]'))
    assert len(browser.find_elements(By.CSS_SELECTOR, '#timeline li[data-type="user.message"]')) == 2


def test_an_approval_waiting_is_shown_until_answered(spawn_gateway: Callable[..., Gateway],
                                                     browser: WebDriver) -> None:
    gw = spawn_gateway()
    agent_id, env_id = gw.agent_and_environment(configs=[{"name": "bash", "permission_policy": {"type": "always_ask"}}])
    sid = gw.api("POST", "/v1/sessions", {"agent": agent_id, "environment_id": env_id})["id"]
    browser.get(f"{gw.url}/ui/#{sid}")
    wait(browser, "the stream live", lambda: browser.find_element(By.ID, "stream-state").text == "live")
    gw.say(sid, 'tool:bash {"command": "echo approved-ok"}')
    call = '#timeline li[data-type="agent.tool_use"]'
    wait(browser, "the call waiting for approval", lambda: "approval waiting" in text(browser, f"{call}.waiting"))
    assert not browser.find_elements(By.CSS_SELECTOR, f"{call} pre.tool-result")
    tool_use = next(e for e in gw.events(sid) if e["type"] == "agent.tool_use")
    gw.send(sid, {"type": "user.tool_confirmation", "tool_use_id": tool_use["id"], "result": "allow"})
    wait(browser, "the result after approval", lambda: "approved-ok" in text(browser, f"{call} pre.tool-result"))
    assert not browser.find_elements(By.CSS_SELECTOR, f"{call}.waiting")


def test_a_cut_stream_resumes_after_the_last_event_seen(spawn_gateway: Callable[..., Gateway],
                                                        browser: WebDriver) -> None:
    gw = spawn_gateway()
    agent_id, env_id = gw.agent_and_environment()
    sid = gw.api("POST", "/v1/sessions", {"agent": agent_id, "environment_id": env_id})["id"]
    gw.say(sid, "before the cut")
    gw.wait_idle(sid)
    browser.get(f"{gw.url}/ui/#{sid}")
    wait(browser, "the history", lambda: "echo: before the cut" in text(browser, '#timeline li[data-type="agent.message"]'))
    browser.execute_script("window.sameDocument = true")
    # The browser goes offline (so it cannot reconnect) and the gateway restarts (so the open
    # stream ends). A whole turn happens before the browser is back.
    browser.execute_cdp_cmd("Network.enable", {})
    offline = {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
    browser.execute_cdp_cmd("Network.emulateNetworkConditions", offline)
    gw.stop()
    wait(browser, "the stream broken", lambda: browser.find_element(By.ID, "stream-state").text == "reconnecting")
    gw.start()
    gw.say(sid, "during the cut")
    gw.wait_idle(sid, turns=2)
    browser.execute_cdp_cmd("Network.emulateNetworkConditions", {**offline, "offline": False})
    # Back online, the page resumes after the last event it saw: the missed turn shows, once.
    wait(browser, "the missed turn", lambda: "echo: during the cut" in text(
        browser, '#timeline li[data-type="agent.message"]'), timeout=20)
    wait(browser, "the stream live again", lambda: browser.find_element(By.ID, "stream-state").text == "live")
    time.sleep(1)
    assert len(browser.find_elements(By.CSS_SELECTOR, '#timeline li[data-type="user.message"]')) == 2
    assert len(browser.find_elements(By.CSS_SELECTOR, '#timeline li[data-type="agent.message"]')) == 2
    assert browser.execute_script("return window.sameDocument") is True, "the page was reloaded"


def test_with_a_key_the_page_asks_for_it_and_shows_nothing_without(
        spawn_gateway: Callable[..., Gateway], browser: WebDriver) -> None:
    gw = spawn_gateway(key=True)
    agent_id, env_id = gw.agent_and_environment()
    sid = gw.api("POST", "/v1/sessions", {"agent": agent_id, "environment_id": env_id,
                                          "title": "secret viewer session"})["id"]

    # (3) Without the key: the prompt, and no session data anywhere in the page.
    browser.get(gw.url + "/ui/")
    wait(browser, "the sign-in prompt", lambda: shown(browser, "sign-in"))
    time.sleep(1)
    assert not shown(browser, "viewer")
    page = browser.page_source
    assert sid not in page and "secret viewer session" not in page and "viewer-agent" not in page
    assert not browser.find_elements(By.CSS_SELECTOR, "#session-rows tr")

    # A wrong key is refused and forgotten; still no data.
    browser.find_element(By.ID, "api-key").send_keys("gwk_" + "x" * 32)
    browser.find_element(By.ID, "sign-in-button").click()
    wait(browser, "the refusal", lambda: "refused" in browser.find_element(By.ID, "sign-in-reason").text)
    assert shown(browser, "sign-in") and not shown(browser, "viewer")
    assert sid not in browser.page_source
    assert browser.execute_script("return sessionStorage.length") == 0

    # The right key: the data shows.
    browser.find_element(By.ID, "api-key").send_keys(gw.key)
    browser.find_element(By.ID, "sign-in-button").click()
    row = wait(browser, "the session after signing in", lambda: session_row(browser, sid))
    assert "secret viewer session" in row
    assert not shown(browser, "sign-in")
    # Kept for this tab only: sessionStorage, never localStorage or a cookie.
    assert browser.execute_script("return Object.values(sessionStorage)") == [gw.key]
    assert browser.execute_script("return localStorage.length") == 0
    assert browser.get_cookies() == []
    assert gw.key not in browser.current_url

    # Signing out forgets the key and takes the data off the screen.
    browser.find_element(By.ID, "sign-out").click()
    wait(browser, "the prompt after signing out", lambda: shown(browser, "sign-in"))
    assert sid not in browser.page_source
    assert browser.execute_script("return sessionStorage.length") == 0
    assert console_problems(browser) == []


def test_a_foreign_page_cannot_frame_the_viewer(spawn_gateway: Callable[..., Gateway], browser: WebDriver,
                                                 tmp_path: Path) -> None:
    gw = spawn_gateway()
    # A page of another origin (a file) that frames the viewer: frame-ancestors 'none' blocks it.
    page = tmp_path / "frame.html"
    page.write_text(f'<!doctype html><iframe id="f" src="{gw.url}/ui/" width="800" height="600"></iframe>')
    browser.get(page.as_uri())
    time.sleep(2)
    browser.switch_to.frame(browser.find_element(By.ID, "f"))
    assert not browser.find_elements(By.ID, "sign-in"), "the viewer rendered inside a foreign page"
    browser.switch_to.default_content()
