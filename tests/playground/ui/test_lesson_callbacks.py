"""A preset asks first: its button shows the question and the knobs, an answer starts the run,
and the stream's frames carry the panel on with the measured answer."""

import time

import gradio as gr

from playground.access.seat import Seat
from playground.teaching.lessons import LESSONS
from playground.ui import build_ui
from playground.ui.callbacks import BoardCallbacks
from playground.ui.controls import Knobs
from playground.ui.story import MAX_ANSWERS
from tests.playground.driving import settled

NUM_KNOBS = len(Knobs._fields)
PAGE = gr.Request(session_hash="a-page")


def _callbacks(driver) -> BoardCallbacks:
    """The callbacks of a board whose page "a-page" has loaded (the seat knows it)."""
    cb = BoardCallbacks(driver)
    cb.seat.arrive(PAGE.session_hash, time.monotonic())
    return cb


def test_a_preset_asks_its_question_and_starts_nothing(driver):
    values = _callbacks(driver).open_lesson("kv_pressure", PAGE)
    knobs = Knobs(*values[:NUM_KNOBS])
    assert knobs.scenario == "kv_pressure" and knobs.kv_blocks == 40
    lesson, panel = values[NUM_KNOBS + 2], values[NUM_KNOBS + 3]
    assert lesson == {"key": "kv_pressure", "guess": None}
    assert LESSONS["kv_pressure"].question in panel
    assert "40 KV blocks of 16 tokens" in panel and "num_kv_blocks 40" in panel  # what runs
    assert "preempted" not in panel.split("?", 1)[1]  # and not the answer
    buttons = values[NUM_KNOBS + 4 :]
    assert len(buttons) == MAX_ANSWERS + 1 and all(b.visible for b in buttons)
    assert [b.value for b in buttons[:3]] == [t for _, t in LESSONS["kv_pressure"].answers]
    assert driver.state().workload is None  # nothing runs before the visitor answers
    two = _callbacks(driver).open_lesson("long_vs_short", PAGE)[NUM_KNOBS + 4 :]
    assert [b.visible for b in two] == [True, True, False, True]


def test_a_question_opens_on_a_board_cleared_of_the_run_before(driver):
    """The run before (its cards, preemptions, charts) could answer the question: a session
    that drives opens it on the preset's engines with no users yet, for every viewer."""
    cb = _callbacks(driver)
    cb.answer_lesson(-1, {"key": "chat_burst"}, PAGE)
    assert settled(driver, lambda s: s.snapshot.step >= 3).snapshot.step >= 3
    cb.open_lesson("kv_pressure", PAGE)
    state = driver.state()
    assert state.workload is None and not state.records and not state.users
    assert state.snapshot.step == 0 and not state.snapshot.steps
    assert driver.config.num_kv_blocks == 40 and not state.compare  # the preset's engines
    cb.open_lesson("static_vs_continuous", PAGE)
    assert driver.state().compare and driver.state().workload is None


def test_a_question_a_watcher_opens_leaves_the_holders_run(driver):
    cb = BoardCallbacks(driver, Seat("seat", on_handover=driver.resume))
    holder, watcher = gr.Request(session_hash="holder"), gr.Request(session_hash="watcher")
    for page in (holder, watcher):
        cb.seat.arrive(page.session_hash, time.monotonic())
    cb.answer_lesson(-1, {"key": "chat_burst"}, holder)  # takes the free seat
    run = driver.state().run
    values = cb.open_lesson("kv_pressure", watcher)
    assert LESSONS["kv_pressure"].question in values[NUM_KNOBS + 3]  # the question, to read
    assert driver.state().run == run and driver.state().workload == "chat_burst"


def test_an_answer_starts_the_preset_and_keeps_the_guess(driver):
    cb = _callbacks(driver)
    values = cb.answer_lesson(1, {"key": "kv_pressure", "guess": None}, PAGE)
    run = driver.state().run  # the run the answer started: the lesson's verdict is its
    assert values[NUM_KNOBS + 2] == {"key": "kv_pressure", "guess": "preempt", "run": run}
    assert "your guess: <b>some running requests are preempted" in values[NUM_KNOBS + 3]
    assert all(not b.visible for b in values[NUM_KNOBS + 4 :])
    assert driver.state().workload == "kv_pressure" and driver.config.num_kv_blocks == 40
    skipped = cb.answer_lesson(-1, {"key": "prefix_cache", "guess": None}, PAGE)
    assert skipped[NUM_KNOBS + 2]["guess"] == "" and driver.state().workload == "prefix_cache"
    assert cb.answer_lesson(0, {"key": None}, PAGE) == [gr.skip()] * len(skipped)


def test_an_answered_panel_names_its_lesson_run_and_guess_for_the_stream(driver):
    """The stream's frames carry the panel of every guess for the running lesson; the page
    picks the one its slot names (assets/board_stream.js)."""
    panel = _callbacks(driver).answer_lesson(0, {"key": "chat_burst"}, PAGE)[NUM_KNOBS + 3]
    run = driver.state().run
    assert panel.startswith('<div class="pg-live" data-live="lesson" data-key="chat_burst" '
                            f'data-run="{run}" data-guess="few">')  # fmt: skip
    assert "your guess: <b>1 or 2 steps</b>" in panel


def test_the_page_has_the_lesson_and_compare_sections_and_no_compare_tab(driver):
    demo = build_ui(driver)
    ids = {getattr(b, "elem_id", None) for b in demo.blocks.values()}
    assert {"pg-lesson-panel", "pg-lesson-skip", "pg-compare", "pg-scoreboard", "pg-stops",
            "pg-plot-waiting", "pg-plot-cmp_queue0"} <= ids  # fmt: skip
    tabs = [b.label for b in demo.blocks.values() if isinstance(b, gr.Tab)]
    assert tabs == ["Step log", "Sequence inspector"]
    names = {f.name for f in demo.fns.values()}
    assert "refresh_story" not in names  # the lesson and the stop reasons come with the stream
