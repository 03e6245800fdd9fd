"""End to end, in chromium, on the real default model: every lesson's preset with its shipped
workload, one after another on one page of one server. A preset asks first: its question and
what will run, on a board cleared of the run before (nothing there answers it yet). The answer
starts the run; the first verdict shown names its step and the chart; it stays as it is while
the board moves on; and its numbers agree with the step log the board published
(board_feed.py collects it from the stream, verdict_checks.py checks each lesson). The
fixed-length presets' cards hold answers, never a next chat turn. The KV-pressure lesson also
shows why a card waits and what preemption cost its victim; compare mode is the main view.
With PLAYGROUND_UPDATE_SCREENSHOT=1 the docs' pictures of these views are retaken."""

import json
import os
import time
from pathlib import Path

import pytest

from playground.teaching.lessons import LESSONS
from playground.workload.scenarios import SCENARIOS
from tests.e2e.board_feed import BoardFeed
from tests.e2e.step_log import read_log
from tests.e2e.verdict_checks import CHECKS, read_shown

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e

GUESS = 1  # the answer clicked: every lesson has a second one
MORE_STEPS = 6  # steps the board runs past the first verdict before the last look at it ...
CONFIRM_S = 2.0  # ... or seconds, for a run that is over (static vs continuous)
VERDICT_TIMEOUT_MS = 180_000  # the longest, static vs continuous: two lanes on two busy cores
DOCS_VIEWPORT = {"width": 1440, "height": 900}  # of the before/after pictures in lessons.md
PANEL, VERDICT = "#pg-lesson-panel", "#pg-lesson-panel .pg-lesson-m"
STEP_TILE = "() => document.querySelector('#pg-stats .pg-tile-v')?.textContent"
REQUEST_IDS = "() => [...document.querySelectorAll('#pg-board .pg-card .pg-rid')]" \
              ".map(r => r.textContent).filter(Boolean)"  # fmt: skip
WAITING_REASON = """() => [...document.querySelectorAll('.pg-card .pg-badge.pg-waiting')]
    .map(b => b.textContent).find(t => t.startsWith('waiting: ')) || ''"""
COST = """() => [...document.querySelectorAll('.pg-card .pg-cost')].map(c => c.textContent)
    .find(t => /preempted \\d+x, \\d+ tokens recomputed, \\+[\\d.]+ s/.test(t)) || ''"""
ANSWERS = "() => [...document.querySelectorAll('#pg-board .pg-card .pg-text')]" \
          ".map(t => t.textContent)"  # fmt: skip
FIXED_LENGTH = [key for key, sc in SCENARIOS.items()
                if all(p.ignore_eos for p in sc.workload().profiles)]  # fmt: skip


@pytest.fixture(scope="module")
def feed(server):
    feed = BoardFeed(server).start()
    yield feed
    feed.stop()


def _shot(page, name: str, tmp_path, selector: str | None = None) -> Path:
    path = tmp_path / name
    if os.environ.get("PLAYGROUND_UPDATE_SCREENSHOT"):
        path = ROOT / "assets" / name
    (page.locator(selector) if selector else page).screenshot(path=str(path))
    return path


def _page_shot(page, name: str, tmp_path) -> None:
    """The top of the page as the docs show it (DOCS_VIEWPORT), then the page as it was."""
    size = page.viewport_size
    page.set_viewport_size(DOCS_VIEWPORT)
    page.evaluate("window.scrollTo(0, 0)")
    page.mouse.move(0, 0)  # no button under the pointer looks hovered
    page.wait_for_timeout(500)  # the charts' redraw at the new width
    _shot(page, name, tmp_path)
    page.set_viewport_size(size)


def _includes(selector: str, text: str) -> str:
    return f"() => document.querySelector('{selector}')?.textContent.includes({json.dumps(text)})"


@pytest.mark.parametrize("key", list(LESSONS))
def test_a_lesson_asks_first_then_shows_a_verdict_that_the_step_log_bears_out(
    key, page, feed, tmp_path
):
    run = _ask_and_answer(page, key, tmp_path)
    text, shown = _first_verdict(page, key)
    _watch_it_stay(page, feed, key, run, text, shown.step)
    if key in FIXED_LENGTH:
        _answers_only(page)
    if key in ALSO_SHOWN:
        ALSO_SHOWN[key](page, tmp_path)
    assert page.locator(VERDICT).inner_text() == text
    lines = feed.lines(key, run)
    log = read_log(lines, min(shown.step, max(lines)))  # compare mode logs its first lane
    CHECKS[key](shown, log, page.locator("#pg-scoreboard").inner_text())


def _ask_and_answer(page, key: str, tmp_path) -> int:
    """Opens the preset's question, checks what it shows, answers: the run the answer began."""
    lesson, sc = LESSONS[key], SCENARIOS[key]
    page.wait_for_selector(".pg-preset:enabled", timeout=60_000)  # the load event ran
    page.get_by_role("button", name=sc.title).click()
    page.wait_for_function(_includes(PANEL, lesson.question), timeout=90_000)
    page.wait_for_selector(f"#pg-answer-{GUESS}", state="visible", timeout=30_000)
    asked = page.locator(PANEL).inner_text()
    assert sc.what_to_watch in asked and "Knobs:" in asked, asked  # what will run ...
    assert "measured at step" not in asked  # ... not the answer
    # the board under the question: cleared of the run before, nothing to give the answer away
    page.wait_for_function(f"() => ({STEP_TILE})() === '0'", timeout=30_000)
    assert page.evaluate(REQUEST_IDS) == []
    if key == "kv_pressure":
        _page_shot(page, "screenshot-lesson-before.png", tmp_path)
        time.sleep(1)  # nothing runs before the visitor answers
        assert page.evaluate(STEP_TILE) == "0" and page.evaluate(REQUEST_IDS) == []
    page.click(f"#pg-answer-{GUESS}")
    slot = page.locator(f"{PANEL} [data-live=lesson]")
    slot.wait_for(timeout=30_000)
    assert slot.get_attribute("data-key") == key
    assert slot.get_attribute("data-guess") == lesson.answers[GUESS][0]
    return int(slot.get_attribute("data-run"))


def _first_verdict(page, key: str):
    """The first verdict the panel shows, with the guess beside it and the explanation after."""
    lesson = LESSONS[key]
    said = page.locator(PANEL).inner_text()
    assert "measuring:" in said or "measured at step" in said, said
    page.wait_for_function(_includes(PANEL, "measured at step"), timeout=VERDICT_TIMEOUT_MS)
    text, panel = page.locator(VERDICT).inner_text(), page.locator(PANEL).inner_text()
    shown = read_shown(key, text)
    assert f"your guess: {lesson.answers[GUESS][1]}" in panel, panel
    assert ("right" if shown.answer == lesson.answers[GUESS][0] else "not quite") in text
    assert f"See the chart {lesson.chart}" in panel  # the explanation comes after the verdict
    return text, shown


def _watch_it_stay(page, feed, key: str, run: int, text: str, step: int) -> None:
    """The verdict shown never changes while the board runs MORE_STEPS steps past it."""
    deadline = time.monotonic() + CONFIRM_S
    while feed.newest_step(key, run) < step + MORE_STEPS and time.monotonic() < deadline:
        assert page.locator(VERDICT).inner_text() == text
        time.sleep(0.2)
    assert page.locator(VERDICT).inner_text() == text


def _answers_only(page) -> None:
    """Fixed-length answers (ignore_eos) hold no chat-template turn ("user", "assistant")."""
    texts = [t for t in page.evaluate(ANSWERS) if t.strip()]
    assert texts
    turns = [
        t for t in texts if {"user", "assistant", "system"} & {x.strip() for x in t.split("\n")}
    ]
    assert not turns, turns[:2]


def _kv_pressure_views(page, tmp_path) -> None:
    """Why a card waits, what preemption cost its victim, the charts; the docs' pictures."""
    reason = page.wait_for_function(f"() => ({WAITING_REASON})()", timeout=120_000).json_value()
    assert reason.removeprefix("waiting: ") in {
        "token budget spent", "no free KV blocks", "max_num_seqs reached",
        "preempted, recompute pending", "waiting-queue order",
    }, reason  # fmt: skip
    page.wait_for_function(f"() => ({COST})()", timeout=120_000)
    page.wait_for_selector("#pg-plot-waiting .js-plotly-plot .main-svg", timeout=60_000)
    page.click("#pg-pause")  # a still picture: the cards stop changing
    page.wait_for_function(_includes("#pg-pause", "Resume"), timeout=30_000)
    _shot(page, "screenshot-lesson.png", tmp_path, PANEL)
    for view in ("timeline", "waiting"):
        _shot(page, f"screenshot-{view}-chart.png", tmp_path, f"#pg-plot-{view}")
    page.locator("#pg-board").evaluate("b => b.scrollIntoView()")  # the cards at the top
    assert _shot(page, "screenshot-waiting.png", tmp_path).stat().st_size > 50_000
    page.click("#pg-pause")  # Resume
    page.wait_for_function(_includes("#pg-pause", "Pause"), timeout=30_000)
    _page_shot(page, "screenshot-lesson-after.png", tmp_path)  # the verdict as the run goes on


def _compare_views(page, tmp_path) -> None:
    """Compare mode is the main view, above the cards; its answers are cut at max_tokens."""
    page.wait_for_selector("#pg-compare", state="visible", timeout=60_000)
    box, board = page.locator("#pg-compare").bounding_box(), page.locator("#pg-board")
    assert box["y"] < board.bounding_box()["y"]  # above the cards, not in a tab below
    page.wait_for_selector("#pg-plot-cmp_queue1 .js-plotly-plot .main-svg", timeout=60_000)
    assert _shot(page, "screenshot-compare.png", tmp_path, "#pg-compare").stat().st_size > 20_000
    page.wait_for_function(_includes("#pg-stops", "answers are cut"), timeout=60_000)
    assert "stopped at max_tokens" in page.locator("#pg-stops").inner_text()
    _shot(page, "screenshot-stops.png", tmp_path, "#pg-stops")


ALSO_SHOWN = {"kv_pressure": _kv_pressure_views, "static_vs_continuous": _compare_views}
