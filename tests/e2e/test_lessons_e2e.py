"""End to end, in chromium: a preset asks before it shows (the question and what will run, not
the answer), the run plays after the answer and the first verdict shown, with the step it
was measured at and the explanation, stays as it is; a waiting card names why it waits and a
victim's card what preemption cost it; compare mode is the main view. With
PLAYGROUND_UPDATE_SCREENSHOT=1 the README's pictures of these views are retaken."""

import os
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e

WAITING_REASON = """() => [...document.querySelectorAll('.pg-card .pg-badge.pg-waiting')]
    .map(b => b.textContent).find(t => t.startsWith('waiting: ')) || ''"""
COST = """() => [...document.querySelectorAll('.pg-card .pg-cost')].map(c => c.textContent)
    .find(t => /preempted \\d+x, \\d+ tokens recomputed, \\+[\\d.]+ s/.test(t)) || ''"""


def _shot(page, name: str, tmp_path, selector: str | None = None) -> Path:
    path = tmp_path / name
    if os.environ.get("PLAYGROUND_UPDATE_SCREENSHOT"):
        path = ROOT / "assets" / name
    (page.locator(selector) if selector else page).screenshot(path=str(path))
    return path


def test_a_lesson_asks_first_then_shows_the_measured_answer(page, tmp_path):
    page.wait_for_selector("#pg-board .pg-cards", timeout=60_000)
    page.get_by_role("button", name="KV pressure: preemption").click()
    page.wait_for_selector("#pg-answer-1", state="visible", timeout=90_000)
    panel = page.locator("#pg-lesson-panel")
    asked = panel.inner_text()
    assert "What happens when the cache is too small?" in asked and "Knobs:" in asked
    assert "preempted" not in asked  # what will run, not the answer
    time.sleep(2)  # nothing runs before the visitor answers
    assert page.locator("#pg-stats .pg-tile-v").first.inner_text() == "0"  # the step tile
    answer = page.locator("#pg-answer-1").inner_text()
    page.click("#pg-answer-1")
    # the reason as the wait saw it: the next frame may already have admitted that card
    reason = page.wait_for_function(f"() => ({WAITING_REASON})()", timeout=120_000).json_value()
    assert reason.removeprefix("waiting: ") in {
        "token budget spent", "no free KV blocks", "max_num_seqs reached",
        "preempted, recompute pending", "waiting-queue order",
    }, reason  # fmt: skip
    assert "measuring:" in panel.inner_text() or "measured at step" in panel.inner_text()
    page.wait_for_function(
        "() => document.querySelector('#pg-lesson-panel').textContent.includes('measured at')",
        timeout=180_000,
    )
    text = panel.inner_text()
    verdict = page.locator("#pg-lesson-panel .pg-lesson-m").inner_text()  # the first shown
    assert f"your guess: {answer}" in text and "right" in text and "was preempted" in text, text
    assert "See the chart Request timeline" in text  # the explanation comes after the verdict
    page.wait_for_function(f"() => ({COST})()", timeout=120_000)
    assert page.locator("#pg-plot-waiting .js-plotly-plot .main-svg").count() >= 1
    # the verdict never changes while the run goes on
    assert page.locator("#pg-lesson-panel .pg-lesson-m").inner_text() == verdict
    page.click("#pg-pause")  # a still picture: the cards stop changing
    _shot(page, "screenshot-lesson.png", tmp_path, "#pg-lesson-panel")
    for view in ("timeline", "waiting"):
        _shot(page, f"screenshot-{view}-chart.png", tmp_path, f"#pg-plot-{view}")
    assert _shot(page, "screenshot-waiting.png", tmp_path).stat().st_size > 50_000
    page.click("#pg-pause")  # Resume


def test_compare_mode_is_the_main_view(page, tmp_path):
    page.wait_for_selector("#pg-board .pg-cards", timeout=60_000)
    assert not page.locator("#pg-compare").is_visible()
    page.get_by_role("button", name="Static vs continuous").click()
    page.wait_for_selector("#pg-lesson-skip", state="visible", timeout=90_000)
    page.click("#pg-lesson-skip")
    # both lanes start stepping the real model at once: on two busy cores the board's first
    # redraw after the reset can take a while
    page.wait_for_selector("#pg-compare", state="visible", timeout=120_000)
    box, board = page.locator("#pg-compare").bounding_box(), page.locator("#pg-board")
    assert box["y"] < board.bounding_box()["y"]  # above the cards, not in a tab below
    page.wait_for_function(
        "() => document.querySelector('#pg-scoreboard').textContent.includes('static')",
        timeout=60_000,
    )
    page.wait_for_selector("#pg-plot-cmp_queue1 .js-plotly-plot .main-svg", timeout=60_000)
    assert _shot(page, "screenshot-compare.png", tmp_path, "#pg-compare").stat().st_size > 20_000
    # every answer has a fixed length (ignore_eos): the stop reasons say they are cut
    page.wait_for_function(
        "() => document.querySelector('#pg-stops').textContent.includes('answers are cut')",
        timeout=120_000,
    )
    assert "stopped at max_tokens" in page.locator("#pg-stops").inner_text()
    _shot(page, "screenshot-stops.png", tmp_path, "#pg-stops")
