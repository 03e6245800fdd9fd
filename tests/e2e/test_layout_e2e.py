"""End to end, in chromium, on a tiny random model (fast; the layout is what is measured): the
board stays still while a preset runs (cards, lesson and every chart keep their boxes over
20 ticks, the verdict coming meanwhile), the verdict shows whole, with its explanation, in
the lesson's panel, and the timeline's preemption costs stay inside the chart, one a row, on
a desktop, a projector and a phone; a phone sees the question after a preset tap and one
chart per row; a projector fits the question, the cards and the chart each lesson is
about."""

import time

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from transformers import AutoTokenizer

from engine import loader
from playground.teaching.lessons import LESSONS
from playground.workload.scenarios import SCENARIOS
from tests.tiny_models import make_tiny_model

pytestmark = pytest.mark.e2e
PRESET = "Chat burst"
RUNNING = "KV pressure: preemption"  # its verdict comes at its first preemption, mid-ticks
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


CLICKS = 4  # tries of an answer: a page that opens presets one after another runs into the
# seat's rate limit (opening a question and answering it are a control action each), and a
# refused answer ("Slow down") leaves the question open, as a visitor would click again


def _start_preset(page, preset: str, button: str = "#pg-answer-0") -> None:
    """A preset's question, then `button` (an answer, or the skip): the run starts."""
    page.get_by_role("button", name=preset, exact=True).click()
    page.wait_for_selector(button, state="visible", timeout=90_000)
    for _ in range(CLICKS - 1):
        page.click(button)
        try:
            page.wait_for_selector(button, state="hidden", timeout=10_000)
            return
        except PlaywrightTimeout:
            continue
    page.click(button)
    page.wait_for_selector(button, state="hidden", timeout=30_000)


# The verdict's explanation, and the box of the lesson's panel it must lie in.
WHY = """() => [...['#pg-lesson-panel .pg-lesson', '#pg-lesson-panel .pg-lesson-why']
    .map(s => { const r = document.querySelector(s).getBoundingClientRect();
                return [r.left, r.top, r.right, r.bottom] })]"""


def _assert_the_verdict_shows_whole(page) -> None:
    """The measured answer and its explanation, "See the chart" included, in the panel's box
    (the panel keeps its height: nothing below it moves when the verdict comes)."""
    page.wait_for_selector("#pg-lesson-panel .pg-lesson-why", timeout=60_000)
    panel, why = page.evaluate(WHY)
    assert panel[0] <= why[0] and panel[1] <= why[1], (panel, why)
    assert why[2] <= panel[2] and why[3] <= panel[3], (panel, why)
    assert "See the chart" in page.locator("#pg-lesson-panel .pg-lesson-why").inner_text()


# The timeline's box and the boxes of its cost labels (left, top, right, bottom), once charts.js
# has drawn it `height` px tall at the page's width, with at least one label.
COST_LABELS = """(height) => {
    const plot = document.querySelector('#pg-plot-timeline .js-plotly-plot');
    const svg = plot && plot.querySelector('.main-svg');
    if (!svg) return null;
    const box = e => { const r = e.getBoundingClientRect();
                       return [r.left, r.top, r.right, r.bottom] };
    const [left, top, right, bottom] = box(svg);
    const drawn = Math.abs(bottom - top - height) < 1
        && Math.abs(right - left - plot.clientWidth) < 2;
    const labels = [...plot.querySelectorAll('.annotation')].map(box);
    return drawn && labels.length ? [box(svg), labels] : null }"""
SCREENS = {(1440, 900): 400, (1280, 720): 230, (390, 844): 400}  # screen: timeline's height


def _assert_the_cost_labels_fit(page) -> None:
    """On every screen (the page resized, KV pressure running), each label of what preemption
    cost lies inside the timeline's box and overlaps no other (its 8 rows hold one each, even
    on a projector)."""
    for (width, height), tall in SCREENS.items():
        page.set_viewport_size({"width": width, "height": height})
        page.locator("#pg-plot-timeline").scroll_into_view_if_needed()  # drawn once near
        chart, labels = page.wait_for_function(COST_LABELS, arg=tall, timeout=60_000).json_value()
        for i, (left, top, right, bottom) in enumerate(labels):
            assert chart[0] <= left and chart[1] <= top, (width, chart, labels)
            assert right <= chart[2] and bottom <= chart[3], (width, chart, labels)
            for other in labels[i + 1 :]:  # one above the other, never across
                assert bottom <= other[1] or other[3] <= top, (width, labels)
    page.evaluate("() => window.scrollTo(0, 0)")


def test_nothing_moves_while_a_preset_runs(server, browser):
    page = _open(browser, server, 1440, 900)
    try:
        _start_preset(page, RUNNING)
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
        _assert_the_verdict_shows_whole(page)
        _assert_the_cost_labels_fit(page)
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
# about (the lesson panel names it, data-chart), drawn; each box's top and bottom, page
# coordinates. `fits` is whether they are all on the screen.
ON_SCREEN = """() => { const lesson = document.querySelector('#pg-lesson-panel .pg-lesson');
    const chart = lesson.dataset.chart;
    const boxes = Object.fromEntries(['#pg-lesson-panel .pg-lesson-q', '#pg-board .pg-cards',
        `#pg-plot-${chart} .js-plotly-plot .main-svg`].map(s => {
            const e = document.querySelector(s);
            const r = e ? e.getBoundingClientRect() : {top: 0, bottom: 0};
            return [s, [r.top + window.scrollY, r.bottom + window.scrollY]] }));
    const fits = Object.values(boxes).every(([top, bottom]) =>
        0 <= top && top < bottom && bottom <= window.innerHeight);
    return {chart, boxes, fits} }"""


def test_a_projector_fits_the_question_the_cards_and_each_lessons_chart(server, browser, tmp_path):
    """Every lesson preset in turn on one page, its question skipped, measured as soon as its
    chart is drawn: an open lesson's chart leads the charts (style.css), and in compare mode
    the cards come before the comparison, its queues first. The chat burst's verdict (at its
    second step) shows whole in the projector's shorter panel."""
    page = _open(browser, server, 1280, 720)
    try:
        for key, lesson in LESSONS.items():
            _start_preset(page, SCENARIOS[key].title, "#pg-lesson-skip")
            try:
                page.wait_for_function(f"() => ({ON_SCREEN})().fits", timeout=30_000)
            except PlaywrightTimeout:
                pytest.fail(f"{key} does not fit 1280x720: {page.evaluate(ON_SCREEN)}")
            assert page.evaluate(ON_SCREEN)["chart"] == lesson.plot
            if key == "chat_burst":
                _assert_the_verdict_shows_whole(page)
            if key == "kv_pressure":
                page.screenshot(path=tmp_path / "projector-kv-pressure.png")
    finally:
        page.close()
