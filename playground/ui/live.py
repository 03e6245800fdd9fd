"""The live board over the stream: the slots the stream fills, and what a session keeps its own.

What every viewer sees of the live board (stat tiles, cards, step log, scoreboard, banner, stop
reasons, charts, the lesson's measured answer) comes over one stream per page
(playground/server/board_stream.py), built once for everyone; assets/board_stream.js writes it
into "live slots", empty elements that the board's components hold while the session looks at
the live board. A session that rewinds gets its rewound board in those components instead (no
slot there: the stream's frames no longer show), and "Live" puts the slots back. What stays per
session, in the timer's tick: the visitor's own card, the inspected request (and its block
table), the seat banner and role, the rewind slider's range.
"""

from dataclasses import replace
from html import escape

import gradio as gr

from playground.access.seat import Role
from playground.board import cards
from playground.board.inspector import render_inspector
from playground.board.state import BoardState
from playground.board.views import FigureCache
from playground.remote.views import is_remote
from playground.ui.widgets import load_asset


def live_slot(key: str) -> str:
    """Where board_stream.js writes the frame's `key` (display: contents, so the cards land
    in the grid around the slot)."""
    return f'<div class="pg-live" data-live="{key}" style="display: contents"></div>'


def lesson_slot(panel: str, key: str, run: int, guess: str) -> str:
    """The session's answered lesson: `panel` now, the frame's panel of (key, run, guess) as
    the run goes on."""
    attrs = f'data-key="{escape(key)}" data-run="{run}" data-guess="{escape(guess)}"'
    return f'<div class="pg-live" data-live="lesson" {attrs}>{panel}</div>'


def my_cards(state: BoardState, me: str) -> str:
    """The visitor's own card, then the slot of everybody else's, in one grid."""
    mine = tuple(r for r in state.records if r.owner == me)
    html = cards.render_cards(replace(state, users=(), records=mine), me)
    return html.removesuffix("</div>") + live_slot("cards") + "</div>"


def own_text(state: BoardState, me: str, rid, deltas) -> tuple:
    """(board, inspector) of one tick: the visitor's own card while it has requests, the
    inspected request's detail."""
    has_mine = any(r.owner == me for r in state.records)
    board = my_cards(state, me) if has_mine else gr.skip()
    inspector = render_inspector(state.details.get(rid), deltas, rid) if rid else gr.skip()
    return board, inspector


def own_charts(state: BoardState, rid: str | None, cache: FigureCache) -> str:
    """The inspected request's block table, {chart: figure} JSON ("" when none is inspected:
    the page draws the stream's, the board's own pick, again); built once a version for every
    session inspecting it (FigureCache.block_table)."""
    if not rid or is_remote(state):
        return ""
    return '{"blocks":' + cache.block_table(state, rid) + "}"


def wants_full_rate(state: BoardState, me: str, rid, rewound, role: Role, holds: bool) -> bool:
    """Who ticks at the full rate: the seat's holder (`holds`) and whoever queues for it, a
    visitor whose own request runs, one inspecting a request, one rewinding. The others' ticks
    only keep their presence, seat banner and rewind slider current."""
    if holds or role is Role.QUEUED or rid or rewound is not None:
        return True
    return any(r.owner == me and not r.finished for r in state.records)


def stream_js() -> str:
    """The page's load: board_stream.js subscribes, and draws charts with charts.js."""
    return f"() => ({load_asset('board_stream.js')})({load_asset('charts.js')})"


def stream_pass_js() -> str:
    """The seat's token changed: the stream reconnects with it (board_stream.js's setPass),
    or is opened with it when the page's stream has not started yet."""
    return "(token) => window.pgStream ? window.pgStream.setPass(token) : (window.pgPass = token)"


def own_charts_js() -> str:
    """The session's own charts: drawn in place of the stream's, which come back without them
    (board_stream.js's setOwn; charts.js alone before the stream has started)."""
    return (
        "(figures) => window.pgStream ? window.pgStream.setOwn(figures) : "
        f"({load_asset('charts.js')})(figures)"
    )
