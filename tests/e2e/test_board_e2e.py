"""End to end: `python app.py` on a free port, driven by Playwright in Debian's chromium.

Start a preset, see simulated users stream, the charts drawn, a request finish with its
stop-reason badge, and the visitor's own prompt answered. The screenshot goes to pytest's
tmp dir; PLAYGROUND_UPDATE_SCREENSHOT=1 writes assets/screenshot.png (the README's) instead.
"""

import contextlib
import os
import time
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


# The simulated users' cards: request id -> [text, tokens streamed]; `running` keeps only those
# whose badge says running. The foot's token count tells a card that streamed from one whose
# 420-character tail only slid.
USER_CARDS = """(running) => Object.fromEntries(
    [...document.querySelectorAll('.pg-card:not(.pg-mine)')]
    .filter(c => c.querySelector('.pg-rid').textContent
                 && (!running || c.querySelector('.pg-badge.pg-running')))
    .map(c => [c.querySelector('.pg-rid').textContent, [c.querySelector('.pg-text').textContent,
               parseInt(c.querySelector('.pg-foot').textContent) || 0]]))"""
STOP_BADGES = "() => document.querySelectorAll('.pg-badge[class*=\"pg-stop-\"]').length"
MY_ANSWER = """() => { const c = document.querySelector('.pg-card.pg-mine');
    return c && c.querySelector('.pg-finished') ? c.querySelector('.pg-text').textContent : ''}"""
# The steps the "Tokens per step" chart shows, and whether its plot is still `first` (Gradio
# re-mounts a gr.Plot it sends a new figure to; assets/charts.js draws in place instead).
BATCH_STEPS = """(first) => { const gd = document.querySelector('#pg-plot-batch .js-plotly-plot');
    return [gd && gd.data ? gd.data[0].x.length : -1, gd === (first || gd)] }"""
# The board's eleven charts (the compare view's are not .pg-plot), each drawn by Plotly.
BOARD_PLOTS = """() => [...document.querySelectorAll('.pg-plot')].map(p => {
    const gd = p.querySelector('.js-plotly-plot');
    if (!gd || !gd.data || !gd.querySelector('.main-svg')) return null;
    return (gd.layout.title && gd.layout.title.text) || '?' })"""
NUM_BOARD_PLOTS = 11
OTHER_VISITOR = """(cls) => [...document.querySelectorAll('.pg-card')].some(c =>
    c.querySelector('.pg-name').textContent.startsWith('Visitor ') && c.querySelector('.' + cls))"""


def _streaming_cards(page, timeout_s: float = 120.0, gap_ms: int = 1000) -> list[str]:
    """Request ids of user cards that streamed: running at one look, with more tokens and
    other text `gap_ms` later. Looks again until 3 did or `timeout_s` passed."""
    deadline, grew = time.monotonic() + timeout_s, []
    while time.monotonic() < deadline and len(grew) < 3:
        before = page.evaluate(USER_CARDS, True)
        if len(before) < 3:
            page.wait_for_timeout(250)
            continue
        page.wait_for_timeout(gap_ms)
        after = page.evaluate(USER_CARDS, False)
        grew = [rid for rid, (text, n) in before.items()
                if rid in after and after[rid][1] > n and after[rid][0] != text]  # fmt: skip
    return grew


def _wait_for_a_redraw(page, first) -> None:
    """Until the batch chart shows more steps than now (or is no longer `first`)."""
    steps, _ = page.evaluate(BATCH_STEPS, first)
    grew = f"(first) => {{ const [n, same] = ({BATCH_STEPS})(first); return !same || n > {steps} }}"
    page.wait_for_function(grew, arg=first, timeout=60_000)


def test_board_end_to_end(page, tmp_path):
    page.wait_for_selector("#pg-board .pg-cards", timeout=60_000)
    page.get_by_role("button", name="Chat burst").click()  # it asks its question first
    page.wait_for_selector("#pg-lesson-skip", state="visible", timeout=90_000)  # busy cores
    page.click("#pg-lesson-skip")
    page.get_by_text("Sampling").click()
    page.fill("#pg-max-tokens input[type=number]", "24")
    page.press("#pg-max-tokens input[type=number]", "Enter")
    page.fill("#pg-prompt textarea", "Name three colours of the rainbow.")
    page.click("#pg-send")
    page.wait_for_function("() => document.querySelector('#pg-send-status').textContent"
                           ".includes('Sent as')", timeout=30_000)  # fmt: skip
    streamed = _streaming_cards(page)
    assert len(streamed) >= 3, f"user cards that streamed: {streamed}"
    drawn = f"() => ({BOARD_PLOTS})().filter(t => t).length >= {NUM_BOARD_PLOTS}"
    with contextlib.suppress(PlaywrightTimeout):  # the assert below says which are missing
        page.wait_for_function(drawn, timeout=60_000)
    titles = page.evaluate(BOARD_PLOTS)
    assert len(titles) == NUM_BOARD_PLOTS and all(titles), f"board charts drawn: {titles}"
    first = page.evaluate_handle("() => document.querySelector('#pg-plot-batch .js-plotly-plot')")
    _wait_for_a_redraw(page, first)
    assert page.evaluate(BATCH_STEPS, first)[1], "the chart was re-mounted, not redrawn in place"
    page.evaluate("(gd) => Plotly.relayout(gd, {'xaxis.range': [0, 3]})", first)  # a zoom
    _wait_for_a_redraw(page, first)
    assert page.evaluate("(gd) => gd.layout.xaxis.range", first) == [0, 3], "zoom lost"
    page.wait_for_function(f"() => ({STOP_BADGES})() >= 1", timeout=180_000)
    page.wait_for_function(f"() => ({MY_ANSWER})().trim().length > 0", timeout=180_000)
    assert page.locator(".pg-card.pg-mine .pg-badge[class*='pg-stop-']").count() == 1
    assert "step" in page.locator("#pg-log").inner_text()
    shot = tmp_path / "screenshot.png"
    if os.environ.get("PLAYGROUND_UPDATE_SCREENSHOT"):
        shot = ROOT / "assets" / "screenshot.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 50_000


def test_a_visitor_who_leaves_has_their_request_cancelled(page, browser):
    # Paused, the visitor's request waits and cannot finish by itself (EOS or max_tokens):
    # only the tab's unload can end it. The engine hands an aborted request's output out with
    # its next step, so the board is then stepped by hand, fewer times than it has tokens.
    page.click("#pg-step")  # pauses the board
    other = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
    other.goto(page.url)
    other.wait_for_selector("#pg-board .pg-cards", timeout=60_000)
    other.fill("#pg-prompt textarea", "Write a very long story about a dragon who loves tea.")
    other.click("#pg-send")
    other.wait_for_function("() => document.querySelector('#pg-send-status').textContent"
                            ".includes('Sent as')", timeout=30_000)  # fmt: skip
    other.context.close()  # the tab goes away: demo.unload aborts what it left running
    page.wait_for_timeout(3000)  # the unload runs in the server's background
    cancelled = f"() => ({OTHER_VISITOR})('pg-stop-cancelled')"
    for _ in range(20):  # the visitor asked for 48 tokens
        page.click("#pg-step")
        with contextlib.suppress(PlaywrightTimeout):
            page.wait_for_function(cancelled, timeout=2000)
            break
    assert page.evaluate(cancelled), "the visitor's request was not cancelled when they left"
    page.click("#pg-pause")  # Resume
