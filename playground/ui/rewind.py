"""The rewind bar and the trace / replay panel: their components and their callbacks.

Rewinding is per visitor: the step shown lives in this session's gr.State, and while it is
set the stream's frames and the timer's tick leave the board alone (the engine runs on for
everyone else; pausing stays the Pause button's business). The views are the board's own
(playground/record/rewind.py).
"""

import tempfile
import time
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from pathlib import Path

import gradio as gr

from engine import FieldError
from playground.board import cards
from playground.board.views import board_values, chart_values
from playground.driver import EngineDriver
from playground.record.replay import Replay
from playground.record.replay_door import board_replay
from playground.record.rewind import live_note, rewind_note, rewound_figures, rewound_state
from playground.ui.live import live_slot, my_cards
from playground.ui.widgets import html

REPLAY_MODES = ("its own knobs", "continuous", "static", "A/B: continuous vs static")


class RewindSlider(gr.Slider):
    """The rewind slider, drawn as gr.Slider (a Gradio template component). A value from
    before the step window slid on is clamped into the window, not refused: the page sends
    the value it shows with every tick (and with its load event), and a tick's answer may
    move the window before the page has drawn it. gr.Slider would fail that event, and a
    failed load event leaves the page unknown to the seat (refused every control)."""

    is_template = True

    def preprocess(self, payload: float | None) -> float | None:
        if payload is None:
            return None
        return super().preprocess(min(max(payload, self.minimum), self.maximum))


@dataclass(frozen=True)
class RewindBar:
    at: gr.State  # the step this session looks at; None = live
    slider: gr.Slider
    back: gr.Button
    forward: gr.Button
    live: gr.Button
    note: gr.HTML


@dataclass(frozen=True)
class TracePanel:
    export: gr.Button
    files: gr.File
    upload: gr.File
    mode: gr.Radio
    run: gr.Button
    status: gr.Markdown


def build_rewind() -> RewindBar:
    with gr.Row(elem_classes="pg-rewind", equal_height=True):
        back = gr.Button("◀", size="sm", min_width=40, scale=0, elem_id="pg-rewind-back")
        slider = RewindSlider(0, 1, value=1, step=1, label="rewind: step", scale=6,
                              elem_id="pg-rewind")  # fmt: skip
        forward = gr.Button("▶", size="sm", min_width=40, scale=0, elem_id="pg-rewind-fwd")
        live = gr.Button("Live", size="sm", min_width=60, scale=0, elem_id="pg-live")
    return RewindBar(gr.State(None), slider, back, forward, live, html(live_note(None)))


def build_traces() -> TracePanel:
    with gr.Accordion("Trace and replay: keep this run, run it again", open=False), gr.Row():
        with gr.Column():
            gr.Markdown("The run since the last reset as a **Chrome trace** (open it in "
                        "ui.perfetto.dev or chrome://tracing) and its workload as a "
                        "**replay file**.")  # fmt: skip
            export = gr.Button("Download trace + replay", size="sm", elem_id="pg-export")
            files = gr.File(label="files", file_count="multiple", interactive=False,
                            elem_id="pg-export-files")  # fmt: skip
        with gr.Column():
            upload = gr.File(label="replay file", file_types=[".json"], elem_id="pg-replay")
            mode = gr.Radio(
                list(REPLAY_MODES),
                value=REPLAY_MODES[0],
                label="run it with",
                elem_id="pg-replay-mode",
            )
            run = gr.Button("Run replay", size="sm", variant="primary", elem_id="pg-run-replay")
            status = gr.Markdown("", elem_id="pg-replay-status")
    return TracePanel(export, files, upload, mode, run, status)


class RewindCallbacks:
    def __init__(self, driver: EngineDriver, cache):
        self.driver, self.cache = driver, cache

    def show_step(self, step, rid: str | None, request: gr.Request):
        """The board as after `step` (this session only), the block table of `rid`, the
        request it inspects: [at, note, stats, board, log, figures]."""
        history = self.driver.history
        window = history.steps()
        frame = history.frame(int(step)) if window else None
        if frame is None:
            return [None, live_note(window), *[gr.skip()] * 4]
        snap, users = frame
        live = self.driver.state()
        state = rewound_state(live, snap, users)
        me = cards.visitor_owner(request.session_hash)
        text = board_values(state, me, None, ())
        steps = live.snapshot.steps
        end = steps[-1].start + steps[-1].duration if steps else None
        figures = rewound_figures(state, window, end, rid)
        payload = "{" + ",".join(f'"{k}":{v}' for k, v in figures.items()) + "}"
        note = rewind_note(snap.step, window, history.nbytes(), len(history))
        return [snap.step, note, text[0], text[1], text[2], payload]

    def step_back(self, at, slider, rid: str | None, request: gr.Request):
        return self._step_by(at, slider, -1, rid, request)

    def step_forward(self, at, slider, rid: str | None, request: gr.Request):
        return self._step_by(at, slider, 1, rid, request)

    def _step_by(self, at, slider, delta: int, rid: str | None, request: gr.Request):
        """One step from the one shown (from the newest, if live): [slider, *show_step]."""
        window = self.driver.history.steps()
        if window is None:
            return [gr.skip()] * 7
        step = min(window[1], max(window[0], int(at if at is not None else slider) + delta))
        return [gr.Slider(value=step), *self.show_step(step, rid, request)]

    def go_live(self, request: gr.Request):
        """Back to the live board: [at, note, slider, stats, board, log, figures], the live
        slots back in stats, board and log (the stream fills them), every live chart."""
        state, window = self.driver.state(), self.driver.history.steps()
        me = cards.visitor_owner(request.session_hash)
        _, figures = chart_values(state, self.cache, {})
        return [None, live_note(window), slider_update(window), live_slot("stats"),
                my_cards(state, me), live_slot("log"), figures]  # fmt: skip

    # -- trace and replay ----------------------------------------------------------------------
    def export(self):
        state = self.driver.state()
        folder = Path(tempfile.mkdtemp(prefix="cb-run-"))
        stamp = time.strftime("%Y%m%d-%H%M%S")
        trace = self.driver.write_trace(folder / f"trace-{stamp}.json", cards.request_labels(state))
        replay = self.driver.write_replay(folder / f"replay-{stamp}.json")
        return [str(trace), str(replay)]

    def run_replay(self, path, mode: str):
        if not path:
            return "Choose a replay file first.", gr.skip()
        try:
            d = self.driver
            replay = board_replay(Replay.load(path), d.limits, d.tokenizer, d.base_config)
            config, compare = replay.config, replay.compare
            if mode in ("continuous", "static"):
                config, compare = replace(config, batching=mode), False
            elif mode == REPLAY_MODES[3]:
                compare = True
            self.driver.start_replay(replay, config, compare)
        except (FieldError, ValueError) as exc:
            message = cards.esc(f"Refused: {exc}")
            gr.Warning(message)
            return message, gr.skip()
        except FutureTimeout:
            return "The engine was too busy to start the replay in time; try again.", gr.skip()
        self.driver.resume()
        where = " side by side: the comparison is above the cards" if compare else ""
        return (f"Replaying {len(replay.requests)} requests{where}.", gr.Button("Pause"))


def slider_update(window: tuple[int, int] | None):
    """The slider over the steps kept, at the newest; gr.skip() before the first step."""
    if window is None:
        return gr.skip()
    return gr.Slider(minimum=window[0], maximum=max(window[1], window[0] + 1), value=window[1])
