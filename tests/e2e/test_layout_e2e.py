"""End to end, in chromium, on a tiny random model (fast; the layout is what is measured): the
board stays still while a preset runs (cards, lesson and every chart keep their boxes over
20 ticks), a phone sees the question after a preset tap and one chart per row, a projector
fits the question, the cards and the chart the lesson is about."""

import time

import pytest
from transformers import AutoTokenizer

from engine import loader
from tests.tiny_models import make_tiny_model

pytestmark = pytest.mark.e2e
PRESET = "Chat burst"
TICK_S = 0.25
NUM_TICKS = 20
# Every box that must not move: the cards, each card, the lesson, each chart of the board.
BOXES = """() => Object.fromEntries(
    ['#pg-board .pg-cards', '#pg-lesson-panel', ...[...document.querySelectorAll('.pg-plot')]
        .map(p => '#' + p.id), ...[...document.querySelectorAll('.pg-card')].keys()]
    .map(s => { const e = typeof s === 'number' ? document.querySelectorAll('.pg-card')[s]
                                                : document.querySelector(s);
                const r = e.getBoundingClientRect();
                return [s, [r.x, r.y + window.scrollY, r.width, r.height]] }))"""
STEP = "() => parseInt(document.querySelector('#pg-stats .pg-tile-v').textContent)"


def SERVER_ARGS(tmp_path_factory) -> list[str]:  # noqa: N802 (conftest reads this name)
    """The tiny random model, saved with the bundled model's tokenizer; 8 steps a second, so
    a preset runs long enough to watch."""
    folder = tmp_path_factory.mktemp("tiny-model")
    make_tiny_model("llama").save_pretrained(folder)
    AutoTokenizer.from_pretrained(loader._resolve_source("default", None)).save_pretrained(folder)
    return ["--model", str(folder), "--pace", "8", "--max-num-seqs", "16"]


def _open(browser, server, width: int, height: int):
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(server)
    page.wait_for_selector("#pg-board .pg-cards", timeout=60_000)
    page.wait_for_selector(".pg-preset:enabled", timeout=60_000)  # the load event ran
    return page


def _start_preset(page, preset: str = PRESET) -> None:
    """A preset's question, then its first answer: the run starts."""
    page.get_by_role("button", name=preset).click()
    page.wait_for_selector("#pg-answer-0", state="visible", timeout=90_000)
    page.click("#pg-answer-0")
    page.wait_for_selector("#pg-answer-0", state="hidden", timeout=30_000)


def test_nothing_moves_while_a_preset_runs(server, browser):
    page = _open(browser, server, 1440, 900)
    try:
        _start_preset(page)
        page.wait_for_function(f"() => ({STEP})() >= 4", timeout=60_000)
        page.wait_for_selector("#pg-plot-slots .js-plotly-plot .main-svg", timeout=30_000)
        first, step0 = page.evaluate(BOXES), page.evaluate(STEP)
        texts = set()
        for _ in range(NUM_TICKS):
            time.sleep(TICK_S)
            assert page.evaluate(BOXES) == first  # not one pixel, not one box
            texts.add(page.locator("#pg-board").inner_text())
        assert page.evaluate(STEP) >= step0 + 10 and len(texts) >= 5  # it did run meanwhile
        assert len(first) == 2 + 11 + 9  # cards, lesson, 11 charts, your card and 8 users'
        visible = page.locator("#pg-charts .modebar-container:visible").count()
        assert visible == 0  # no Plotly toolbar over titles
    finally:
        page.close()


def test_a_phone_sees_the_question_and_a_chart_per_row(server, browser):
    page = _open(browser, server, 390, 844)
    try:
        page.get_by_role("button", name=PRESET).click()
        question = page.locator("#pg-lesson-panel .pg-lesson-q")
        question.wait_for(timeout=30_000)
        page.wait_for_function(
            """() => { const r = document.querySelector('#pg-lesson-panel .pg-lesson-q')
                           .getBoundingClientRect();
                       return r.top >= 0 && r.bottom <= window.innerHeight }""",
            timeout=5_000,
        )
        boxes = page.evaluate(
            """() => [...document.querySelectorAll('.pg-plot')].map(p => {
                const r = p.getBoundingClientRect(); return [r.x, r.width] })"""
        )
        assert {x for x, _ in boxes} == {boxes[0][0]}, boxes  # one per row: one left edge
        assert min(w for _, w in boxes) >= 300, boxes  # the screen's width, less its margins
    finally:
        page.close()


# What a projector must show at once: the question, the cards and the chart the lesson is
# about (the lesson panel names it, data-chart); each box's top and bottom, page coordinates.
ON_SCREEN = """() => { const chart = document.querySelector('#pg-lesson-panel .pg-lesson')
        .dataset.chart;
    return [chart, Object.fromEntries(['#pg-lesson-panel .pg-lesson-q', '#pg-board .pg-cards',
        `#pg-plot-${chart}`].map(s => { const r = document.querySelector(s)
            .getBoundingClientRect();
        return [s, [r.top + window.scrollY, r.bottom + window.scrollY]] }))] }"""


def test_a_projector_fits_the_question_the_cards_and_the_lessons_chart(server, browser, tmp_path):
    """KV pressure's chart is the timeline, in the second row when no lesson is open (every
    chart a lesson names has its rule in style.css: tests/playground/test_lessons.py)."""
    preset, chart = "KV pressure", "timeline"
    page = _open(browser, server, 1280, 720)
    try:
        _start_preset(page, preset)
        page.wait_for_selector(f"#pg-plot-{chart} .js-plotly-plot .main-svg", timeout=30_000)
        page.wait_for_timeout(1200)  # charts.js has drawn them projector-short
        page.screenshot(path=tmp_path / f"projector-{chart}.png")
        named, boxes = page.evaluate(ON_SCREEN)
        assert named == chart
        assert all(0 <= top < bottom <= 720 for top, bottom in boxes.values()), boxes
    finally:
        page.close()
