"""The board: `build_ui(driver) -> gr.Blocks`, composed of one builder per section.

Layout first (controls on the left, cards and charts on the right, tabs below, the hidden
parts the timer moves), then the wiring, at the bottom. The callbacks are in callbacks.py,
the sections in controls.py and sections.py. One gr.Timer refreshes everything from the
driver's latest BoardState and never waits for the driver.
"""

import gradio as gr

from playground.driver import EngineDriver
from playground.scenarios import DEFAULT_SCENARIO, SCENARIOS
from playground.ui.callbacks import TICK_S, BoardCallbacks, TickOutputs
from playground.ui.controls import Controls, build_controls, scenario_knobs
from playground.ui.sections import (
    Refresh,
    Tabs,
    Top,
    build_board,
    build_refresh,
    build_tabs,
    build_top,
)
from playground.ui.widgets import load_asset

__all__ = ["TICK_S", "build_ui", "load_asset"]


def build_ui(driver: EngineDriver) -> gr.Blocks:
    callbacks = BoardCallbacks(driver)
    first, _ = callbacks.cache.get(driver.state())
    with gr.Blocks(title="Continuous batching playground") as demo:
        refresh = build_refresh(TICK_S)
        top = build_top()
        with gr.Row(equal_height=False):
            controls = build_controls(driver, scenario_knobs(driver, SCENARIOS[DEFAULT_SCENARIO]))
            board = build_board(first)
        tabs = build_tabs(first)
        _wire_refresh(demo, callbacks, refresh, top, board, tabs)
        _wire_controls(demo, callbacks, controls, tabs)
    return demo


def _wire_refresh(demo, cb: BoardCallbacks, refresh: Refresh, top: Top, board, tabs: Tabs):
    r = refresh
    outputs = list(TickOutputs(r.version, r.chart_version, r.compare_version, r.charts_at,
                               r.timer, top.alert, top.stats, board, tabs.log, tabs.inspector,
                               tabs.scoreboard))  # fmt: skip
    hidden = dict(show_progress="hidden", queue=False)
    inputs = [r.version, r.chart_version, r.charts_at, tabs.inspect_rid, r.timer]
    r.timer.tick(cb.tick, inputs, outputs, **hidden)
    demo.load(cb.tick, inputs, outputs, show_progress="hidden")
    r.chart_version.change(cb.redraw_charts, [r.chart_version, r.sent], [r.sent, r.figures],
                           **hidden)  # fmt: skip
    r.compare_version.change(cb.redraw_compare, [r.compare_version, r.sent_compare],
                             [r.sent_compare, r.compare_figures], **hidden)  # fmt: skip
    draw = load_asset("charts.js")
    r.figures.change(None, r.figures, None, js=draw, **hidden)
    r.compare_figures.change(None, r.compare_figures, None, js=draw, **hidden)
    demo.unload(cb.leave)


def _wire_controls(demo, cb: BoardCallbacks, c: Controls, tabs: Tabs):
    knobs = list(c.knobs)
    gr.api(cb.generate, api_name="generate", concurrency_limit=None)
    c.knobs.scenario.change(cb.pick_scenario, c.knobs.scenario, [*knobs[1:], c.note],
                            show_progress="hidden")  # fmt: skip
    c.start.click(cb.start, knobs, c.pause)
    for key, button in c.presets.items():
        button.click(lambda key=key: cb.start_preset(key), None, [*knobs, c.note, c.pause])
    c.pause.click(cb.toggle_pause, None, c.pause)
    c.step.click(cb.single_step, None, c.pause)
    k = c.knobs
    engine_knobs = [k.batching, k.queue, k.budget, k.max_seqs, k.kv_blocks]
    c.reset.click(cb.reset_board, engine_knobs, c.pause)
    c.pace.change(cb.set_pace, c.pace, None)
    sampling = list(c.sampling)
    c.send.click(cb.submit_prompt, sampling, [c.sampling.prompt, c.send_status])
    c.sampling.prompt.submit(cb.submit_prompt, sampling, [c.sampling.prompt, c.send_status])
    c.cancel.click(cb.cancel_mine, None, c.send_status)
    tabs.refresh_ids.click(cb.list_requests, None, tabs.inspect_rid)
    tabs.inspector_tab.select(cb.list_requests, None, tabs.inspect_rid)
    tabs.inspect_rid.change(cb.inspect_request, tabs.inspect_rid, tabs.inspector)
