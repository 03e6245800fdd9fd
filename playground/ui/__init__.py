"""The board: `build_ui(driver) -> gr.Blocks`, composed of one builder per section.

Layout first (controls on the left, cards and charts on the right, tabs below, the hidden
parts the timer moves), then the wiring, at the bottom. The callbacks are in callbacks.py,
the sections in controls.py and sections.py. The live board comes over one stream per page,
built once for every viewer (live.py, playground/server/board_stream.py); one gr.Timer per
session brings this session's own things, never waits for the driver and sets off nothing
else. A session's own action (a control, the seat button, a prompt, inspecting, rewinding) is
followed by a tick at once, so the timer's rate follows what the action made of the session
(a watcher's timer may be minutes apart in a crowd: playground/access/audience.py).

Every event is private to the page (api_visibility="private": not in the Gradio API, and
gradio_client refuses it); the one endpoint meant for clients is `/generate` (gr.api).
"""

from collections.abc import Callable

import gradio as gr

from playground.access.audience import TICK_S
from playground.access.seat import Seat
from playground.access.seat_pass import SeatPass
from playground.driver import EngineDriver
from playground.remote.views import INTRO as REMOTE_INTRO
from playground.remote.views import is_remote
from playground.ui.callbacks import BoardCallbacks, TickOutputs
from playground.ui.controls import Controls, build_controls, scenario_knobs
from playground.ui.live import my_cards, own_charts_js, stream_js, stream_pass_js
from playground.ui.rewind import RewindBar, TracePanel, build_rewind, build_traces
from playground.ui.sections import (
    INTRO,
    Refresh,
    Tabs,
    Top,
    build_board,
    build_refresh,
    build_tabs,
    build_top,
)
from playground.ui.story import (
    LessonSection,
    build_compare,
    build_lesson,
    build_stops,
)
from playground.ui.widgets import load_asset
from playground.workload.scenarios import DEFAULT_SCENARIO, SCENARIOS

__all__ = ["TICK_S", "build_ui", "load_asset"]


PRIVATE = dict(api_visibility="private")  # the page's own events: no Gradio API endpoint
QUEUE_POLL_S = 0.02  # how often Gradio's queue looks for a new event (its own default: 1 ms)
PROGRESS_POLL_S = 0.1  # ... and for progress to send (10 ms); the board sends none


def build_ui(driver: EngineDriver, seat: Seat | None = None,
             seat_pass: SeatPass | None = None) -> gr.Blocks:  # fmt: skip
    """The board; `seat` says who may drive it (default: anyone, ControlMode.OPEN);
    `seat_pass`: the tokens of the holders' full-rate board streams (the fan-out's)."""
    callbacks = BoardCallbacks(driver, seat, seat_pass)
    first, _ = callbacks.cache.get(driver.state())
    with gr.Blocks(title="Continuous batching playground") as demo:
        refresh = build_refresh(TICK_S)
        remote = is_remote(driver.state())  # a remote server's engine knobs are its own
        top = build_top(REMOTE_INTRO if remote else INTRO)
        rewind = build_rewind()
        with gr.Row(equal_height=False):
            k0 = scenario_knobs(driver, SCENARIOS[DEFAULT_SCENARIO])
            controls = build_controls(driver, k0, engine_knobs=not remote)
            with gr.Column(scale=3):
                lesson = build_lesson()
                build_compare(first)
                board = build_board(first, my_cards(driver.state(), ""))
                build_stops()
        tabs = build_tabs()
        traces = build_traces()
        retick = _wire_refresh(demo, callbacks, refresh, board, tabs, controls, rewind)
        _wire_controls(demo, callbacks, controls, tabs, lesson, refresh, retick)
        _wire_rewind(callbacks, rewind, traces, refresh, top, board, tabs, controls, retick)
    _poll_gently(demo)
    return demo


def _poll_gently(demo: gr.Blocks) -> None:
    """Gradio's queue polls for work with `asyncio.sleep`: every 1 ms on Linux, idle or not.
    That wakes the event loop a thousand times a second, and each wake-up takes a core and the
    GIL from the engine's forward on the driver thread. Gradio has no public setting for it,
    so this sets its queue's two intervals; a queued event waits at most QUEUE_POLL_S more."""
    demo._queue.sleep_when_free = QUEUE_POLL_S
    demo._queue.progress_update_sleep_when_free = PROGRESS_POLL_S


def _wire_refresh(demo, cb: BoardCallbacks, refresh: Refresh, board, tabs: Tabs, c: Controls,
                  rewind: RewindBar) -> Callable:  # fmt: skip
    """The timer, the page's load and unload; returns `retick(event)`, which has a tick
    follow the session's own `event`."""
    r = refresh
    outputs = list(TickOutputs(r.version, r.timer, board, tabs.inspector, r.own_figures,
                               r.stream_pass, rewind.slider, c.seat, c.role))  # fmt: skip
    hidden = dict(show_progress="hidden", queue=False, **PRIVATE)
    inputs = [r.version, tabs.inspect_rid, r.timer, c.role, c.seat, rewind.at, rewind.slider]
    r.timer.tick(cb.tick, inputs, outputs, **hidden)
    demo.load(cb.arrive, inputs, outputs, **hidden)
    demo.load(None, None, None, js=stream_js(), **hidden)  # the stream's subscription
    c.role.change(cb.show_role, c.role, [c.pause, *c.drive, c.seat_button], **hidden)
    r.figures.change(None, r.figures, None, js=load_asset("charts.js"), **hidden)  # rewound
    r.own_figures.change(None, r.own_figures, None, js=own_charts_js(), **hidden)
    r.stream_pass.change(None, r.stream_pass, None, js=stream_pass_js(), **hidden)
    demo.unload(cb.leave)

    def retick(event) -> None:
        event.then(cb.tick, inputs, outputs, **hidden)

    return retick


def _wire_controls(demo, cb: BoardCallbacks, c: Controls, tabs: Tabs, lesson: LessonSection,
                   r: Refresh, retick: Callable):  # fmt: skip
    knobs = list(c.knobs)
    gr.api(cb.generate, api_name="generate", concurrency_limit=None)  # for clients
    p = PRIVATE
    c.knobs.scenario.change(cb.pick_scenario, c.knobs.scenario, [*knobs[1:], c.note],
                            show_progress="hidden", **p)  # fmt: skip
    retick(c.seat_button.click(cb.toggle_seat, [c.role, c.seat], [c.seat, c.role], **p))
    retick(c.start.click(cb.start, knobs, c.pause, **p))
    buttons = [*lesson.answers, lesson.skip]
    answered = [*knobs, c.note, c.pause, lesson.lesson, lesson.panel, *buttons]
    for key, button in c.presets.items():  # a preset asks its question; an answer starts it
        retick(button.click(cb.open_lesson, gr.State(key), answered, **p))
    for i, button in enumerate(buttons):
        index = i if i < len(lesson.answers) else -1  # the last one skips the question
        retick(button.click(cb.answer_lesson, [gr.State(index), lesson.lesson], answered, **p))
    retick(c.pause.click(cb.toggle_pause, None, c.pause, **p))
    retick(c.step.click(cb.single_step, None, c.pause, **p))
    k = c.knobs
    engine_knobs = [k.batching, k.queue, k.budget, k.max_seqs, k.kv_blocks]
    retick(c.reset.click(cb.reset_board, engine_knobs, c.pause, **p))
    retick(c.pace.change(cb.set_pace, c.pace, None, **p))
    sampling = list(c.sampling)
    sent = [c.sampling.prompt, c.send_status]
    retick(c.send.click(cb.submit_prompt, sampling, sent, **p))
    retick(c.sampling.prompt.submit(cb.submit_prompt, sampling, sent, **p))
    retick(c.cancel.click(cb.cancel_mine, None, c.send_status, **p))
    tabs.refresh_ids.click(cb.list_requests, None, tabs.inspect_rid, **p)
    tabs.inspector_tab.select(cb.list_requests, None, tabs.inspect_rid, **p)
    retick(tabs.inspect_rid.change(cb.inspect_request, tabs.inspect_rid,
                                   [tabs.inspector, r.own_figures], **p))  # fmt: skip


def _wire_rewind(board_cb: BoardCallbacks, rb: RewindBar, tp: TracePanel, r: Refresh, top: Top,
                 board, tabs: Tabs, c: Controls, retick: Callable):  # fmt: skip
    """This session's view of an earlier step, and the run's files. Running a replay resets
    the shared engine: a control action, the seat's (BoardCallbacks.run_replay)."""
    cb = board_cb.replays
    hidden = dict(show_progress="hidden", queue=False, **PRIVATE)
    shown = [rb.at, rb.note, top.stats, board, tabs.log, r.figures]
    rid = tabs.inspect_rid  # the block table shows the request the session inspects
    retick(rb.slider.input(cb.show_step, [rb.slider, rid], shown, trigger_mode="always_last",
                           **hidden))  # fmt: skip
    retick(rb.back.click(cb.step_back, [rb.at, rb.slider, rid], [rb.slider, *shown], **hidden))
    retick(rb.forward.click(cb.step_forward, [rb.at, rb.slider, rid], [rb.slider, *shown],
                            **hidden))  # fmt: skip
    retick(rb.live.click(cb.go_live, None, [rb.at, rb.note, rb.slider, top.stats, board,
                                            tabs.log, r.figures], **hidden))  # fmt: skip
    tp.export.click(cb.export, None, tp.files, **PRIVATE)
    retick(tp.run.click(board_cb.run_replay, [tp.upload, tp.mode], [tp.status, c.pause],
                        **PRIVATE))  # fmt: skip
