"""The board's other sections: the top (intro, stat tiles, watchdog banner), the charts next
to the cards, the tabs below (step log, inspector, compare), and the hidden parts the
session's timer drives. The live board's components start as the stream's slots (live.py)."""

from dataclasses import dataclass

import gradio as gr

from playground.board.views import PLOT_KEYS
from playground.ui.live import live_slot
from playground.ui.widgets import html, load_asset, plot

INTRO = """
<div class="pg-hero"><h1>Continuous batching, live</h1>
<p>Simulated users and <b>you</b> share <b>one</b> LLM engine running in this process. Every
step the scheduler picks which sequences run and how many of their tokens fit the budget, then
does <b>one</b> forward pass for all of them over a paged KV cache. Nothing here is animated:
the charts are measured from real model forwards.</p></div>
"""


@dataclass(frozen=True)
class Top:
    stats: gr.HTML
    alert: gr.HTML  # the watchdog's word when a step hangs


@dataclass(frozen=True)
class Tabs:
    log: gr.HTML
    inspector_tab: gr.Tab
    inspect_rid: gr.Dropdown
    refresh_ids: gr.Button
    inspector: gr.HTML


@dataclass(frozen=True)
class Refresh:
    """What the session's timer moves; the live board itself comes over the stream (live.py)."""

    version: gr.Number  # the board version this session's own things were drawn from
    figures: gr.Textbox  # {chart: figure} JSON for assets/charts.js: a rewound board's charts
    own_figures: gr.Textbox  # ... the inspected request's block table, kept out of the stream
    stream_pass: gr.Textbox  # the seat holder's token for its board stream ("" none)
    timer: gr.Timer


def build_top(intro: str = INTRO) -> Top:
    with gr.Row(elem_classes="pg-top"):
        html(intro)
        stats = html(live_slot("stats"), elem_id="pg-stats")
    return Top(stats, html(live_slot("alert"), elem_id="pg-alert"))


def build_board(first: dict[str, str], cards: str) -> gr.HTML:
    """The cards (`cards`: the visitor's own card and the slot of the others') and, under
    them, the charts two by two; returns the cards' HTML."""
    board = html(cards, elem_id="pg-board", js_on_load=load_asset("board.js"))
    with gr.Column(elem_id="pg-charts"):
        for i in range(0, len(PLOT_KEYS), 2):
            row = PLOT_KEYS[i : i + 2]  # a lesson's chart leads: its row goes first (board.js)
            with gr.Row(elem_classes=["pg-plot-row", *(f"pg-row-{key}" for key in row)]):
                for key in row:
                    plot(key, first, elem_classes="pg-plot")
    return board


def build_tabs() -> Tabs:
    with gr.Tabs():
        with gr.Tab("Step log"):
            log = html(live_slot("log"), elem_id="pg-log")
        with gr.Tab("Sequence inspector") as inspector_tab:
            with gr.Row():
                inspect_rid = gr.Dropdown([], label="request", allow_custom_value=True, scale=4)
                refresh_ids = gr.Button("↻ list requests", size="sm", scale=1)
            inspector = gr.HTML(js_on_load=load_asset("beam_tree.js"))  # draws a beam tree
    return Tabs(log, inspector_tab, inspect_rid, refresh_ids, inspector)


def build_refresh(tick_s: float) -> Refresh:
    return Refresh(
        version=gr.Number(-1, visible=False),
        figures=gr.Textbox(visible=False),
        own_figures=gr.Textbox(visible=False),
        stream_pass=gr.Textbox("", visible=False),
        timer=gr.Timer(tick_s),
    )
