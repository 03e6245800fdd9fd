"""End to end: `python app.py` on a free port, driven by Playwright in Debian's chromium.

Start a preset, see simulated users stream, the charts drawn, a request finish with its
stop-reason badge, and the visitor's own prompt answered. The screenshot goes to pytest's
tmp dir; PLAYGROUND_UPDATE_SCREENSHOT=1 writes assets/screenshot.png (the README's) instead.
"""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def _count(page, js: str) -> int:
    return page.evaluate(js)


STREAMING_USERS = """() => [...document.querySelectorAll('.pg-card:not(.pg-mine) .pg-text')]
    .filter(e => e.textContent.trim().length > 5).length"""
STOP_BADGES = "() => document.querySelectorAll('.pg-badge[class*=\"pg-stop-\"]').length"
MY_ANSWER = """() => { const c = document.querySelector('.pg-card.pg-mine');
    return c && c.querySelector('.pg-finished') ? c.querySelector('.pg-text').textContent : ''}"""
PLOTS = "() => document.querySelectorAll('.pg-plot .js-plotly-plot .main-svg').length"
OTHER_VISITOR = """(cls) => [...document.querySelectorAll('.pg-card')].some(c =>
    c.querySelector('.pg-name').textContent.startsWith('Visitor ') && c.querySelector('.' + cls))"""


def test_board_end_to_end(page, tmp_path):
    page.wait_for_selector("#pg-board .pg-cards", timeout=60_000)
    page.get_by_role("button", name="Chat burst").click()
    page.get_by_text("Sampling").click()
    page.fill("#pg-max-tokens input[type=number]", "24")
    page.press("#pg-max-tokens input[type=number]", "Enter")
    page.fill("#pg-prompt textarea", "Name three colours of the rainbow.")
    page.click("#pg-send")
    page.wait_for_function("() => document.querySelector('#pg-send-status').textContent"
                           ".includes('Sent as')", timeout=30_000)  # fmt: skip
    page.wait_for_function(f"() => ({STREAMING_USERS})() >= 3", timeout=120_000)
    page.wait_for_function(f"() => ({PLOTS})() >= 7", timeout=60_000)
    page.wait_for_function(f"() => ({STOP_BADGES})() >= 1", timeout=180_000)
    page.wait_for_function(f"() => ({MY_ANSWER})().trim().length > 0", timeout=180_000)
    assert _count(page, STREAMING_USERS) >= 3
    assert page.locator(".pg-card.pg-mine .pg-badge[class*='pg-stop-']").count() == 1
    assert "step" in page.locator("#pg-log").inner_text()
    shot = tmp_path / "screenshot.png"
    if os.environ.get("PLAYGROUND_UPDATE_SCREENSHOT"):
        shot = ROOT / "assets" / "screenshot.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 50_000


def test_a_visitor_who_leaves_has_their_request_cancelled(page, browser):
    other = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
    other.goto(page.url)
    other.wait_for_selector("#pg-board .pg-cards", timeout=60_000)
    other.fill("#pg-prompt textarea", "Write a very long story about a dragon who loves tea.")
    other.click("#pg-send")
    other.wait_for_function("() => document.querySelector('#pg-send-status').textContent"
                            ".includes('Sent as')", timeout=30_000)  # fmt: skip
    other.context.close()  # the tab goes away: demo.unload aborts what it left running
    page.wait_for_function(f"() => ({OTHER_VISITOR})('pg-stop-cancelled')", timeout=60_000)
