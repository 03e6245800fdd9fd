"""The rewind bar: one session sees an earlier step; the tick leaves its board alone."""

import json

import gradio as gr
import pytest

from playground.board.block_table import pick_request
from playground.board.views import FigureCache
from playground.ui import build_ui
from playground.ui.live import own_charts
from playground.ui.rewind import RewindCallbacks, RewindSlider, slider_update
from tests.playground.driving import fixed, settled


def test_a_session_rewinds_to_an_earlier_step_and_comes_back(driver):
    handles = [driver.submit(f"prompt {i}", fixed(16), owner=f"user:u{i}") for i in range(3)]
    finals = {h.request_id: h.result(timeout=60).text for h in handles}
    settled(driver, lambda s: all(r.finished for r in s.records))
    cb, request = RewindCallbacks(driver, FigureCache()), gr.Request(session_hash="s")
    oldest, newest = driver.history.steps()
    step = newest - 8
    at, note, _stats, board, log, figures = cb.show_step(step, None, request)
    assert at == step and f"step {step}" in note
    assert log.index(f"step {step} ") < log.index(f"step {step - 1} ")  # newest line first
    assert f"step {step + 1} " not in log
    charts = json.loads(figures)
    assert charts["kv"]["layout"]["title"]["text"].startswith(f"KV blocks after step {step}")
    assert charts["batch"]["layout"]["shapes"][0]["x0"] == step
    assert max(charts["batch"]["data"][0]["x"]) == step
    frame, _ = driver.history.frame(step)
    for r in frame.requests:  # each card shows the text of then, shorter than the final one
        assert finals[r.request_id].startswith(r.text)
    assert any(len(r.text) < len(finals[r.request_id]) for r in frame.requests)
    assert any(r.text and r.text in board for r in frame.requests if r.text.isprintable())
    assert driver.is_paused is False  # rewinding never paused the shared engine

    demo = build_ui(driver)
    tick = next(f.fn for f in demo.fns.values() if f.name == "tick")
    out = tick(-1, None, 0.25, "", "", at, 0, request)
    assert out.board == gr.skip() and out.slider == gr.skip() and out.version == gr.skip()
    live = cb.go_live(request)
    assert live[0] is None and live[2].value == newest and "Live" in live[1]
    assert 'data-live="stats"' in live[3] and 'data-live="cards"' in live[4]  # the stream's
    assert 'data-live="log"' in live[5] and set(json.loads(live[6])) >= {"kv", "batch"}


def _table(figures: str) -> list[int]:
    """The physical blocks the block-table chart draws, in order."""
    heat = json.loads(figures)["blocks"]["data"][0]
    return [int(t) for row in heat["text"] for t in row if t]


def test_the_block_table_is_the_inspected_requests_live_and_rewound(driver):
    handles = [driver.submit(f"prompt {i}", fixed(24), owner=f"user:u{i}") for i in range(3)]
    for h in handles:
        h.result(timeout=60)
    cb, request = RewindCallbacks(driver, FigureCache()), gr.Request(session_hash="s")
    for step in range(driver.history.steps()[0], driver.history.steps()[1] + 1):
        frame, _ = driver.history.frame(step)
        held = [r for r in frame.requests if r.block_table]
        if len(held) == 3:  # all three hold blocks: the pick and the inspected one differ
            break
    assert len(held) == 3
    picked = pick_request(frame).request_id
    mine = next(r for r in held if r.request_id != picked)
    figures = cb.show_step(step, mine.request_id, request)[5]
    assert _table(figures) == list(mine.block_table) != list(pick_request(frame).block_table)
    assert _table(cb.step_back(step + 1, step + 1, mine.request_id, request)[6]) == _table(figures)
    assert _table(cb.show_step(step, None, request)[5]) == list(pick_request(frame).block_table)

    for i in range(2):  # live: two running requests, the one not picked inspected
        driver.submit(f"still running {i}", fixed(200), owner=f"user:late{i}")
    settled(driver, lambda s: sum(bool(r.block_table) for r in s.snapshot.requests) == 2)
    driver.pause()
    live = driver.state().snapshot
    mine = next(r for r in live.requests if r.request_id != pick_request(live).request_id)
    assert _table(own_charts(driver.state(), mine.request_id, cb.cache)) == list(mine.block_table)


def test_the_rewind_slider_clamps_what_the_page_sent_before_the_window_slid():
    """The tick moves the window to steps 32-1100; the page's next event still carries the 1
    it showed: gr.Slider refuses it (the event fails), the rewind slider takes the window's
    edge. Gradio keeps a session's copy of a component as the block's own class with the
    answer's arguments (Blocks.postprocess_data), which this builds the same way."""
    slider = RewindSlider(0, 1, value=1, step=1, render=False)
    assert slider.get_block_name() == "slider"  # drawn by the page as gr.Slider
    answer = slider_update((32, 1100)).constructor_args
    moved = RewindSlider(**{**slider.constructor_args, **answer, "render": False})
    assert (moved.preprocess(1), moved.preprocess(500), moved.preprocess(2000)) == (32, 500, 1100)
    with pytest.raises(gr.Error, match="less than minimum"):
        gr.Slider(**{**slider.constructor_args, **answer, "render": False}).preprocess(1)
