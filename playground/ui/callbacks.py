"""What the board's events do. Each callback takes component values and returns values or
component updates; the work is the driver's (playground/driver/) and the views' (views.py).

The engine and the driver are shared by every browser session; per-session things (the
visitor's id, the last board version drawn, the request being inspected) come in through
gr.State / gr.Request. `tick` never waits for the driver. Figures are built once per board
version and shared by all sessions (FigureCache).
"""

import random
import time
from dataclasses import replace
from typing import NamedTuple

import gradio as gr

from engine import EngineConfig
from playground import cards, public
from playground.audience import Audience
from playground.driver import EngineDriver, RequestRejected
from playground.inspector import render_inspector
from playground.scenarios import SCENARIOS
from playground.ui.controls import note, scenario_knobs
from playground.views import FigureCache, board_values, chart_values, compare_values

TICK_S = 0.25  # the text refreshes ~4 times a second
CHART_INTERVAL_S = 0.5  # charts redraw at most 2x/s: the browser's Plotly redraws are the cost
KNOBS_REFUSED = "the engine refused these knobs"


class TickOutputs(NamedTuple):
    """What one tick returns, by name (the wiring lists the components in this order)."""

    version: object
    chart_version: object
    compare_version: object
    charts_at: object
    timer: object  # the timer's interval: longer while many sessions watch
    alert: object
    stats: object
    board: object
    log: object
    inspector: object
    scoreboard: object


def with_knobs(cfg: EngineConfig, batching, queue, budget, max_seqs, kv_blocks) -> EngineConfig:
    """`cfg` with the board's engine knobs; ValueError (from EngineConfig) naming a bad one."""
    return replace(cfg, batching=batching, scheduling_policy=queue,
                   max_num_batched_tokens=int(budget), max_num_seqs=int(max_seqs),
                   num_kv_blocks=int(kv_blocks))  # fmt: skip


def warn(message: str) -> str:
    """Toast `message` and return it for the page, escaped: Gradio renders toasts and Markdown
    as HTML, and a refusal can quote what the visitor typed (a stop string, a pace)."""
    message = cards.esc(message)
    gr.Warning(message)
    return message


class BoardCallbacks:
    def __init__(self, driver: EngineDriver):
        self.driver = driver
        self.cache = FigureCache()
        self.audience = Audience()

    # -- refresh ---------------------------------------------------------------------------
    def tick(self, seen, charts_seen, last_charts, rid, every, request: gr.Request):
        """Cheap: never waits for the driver. The text comes with the tick; the charts
        come through chart_version's change event, at most every CHART_INTERVAL_S. Both
        come more rarely while many people watch (see Audience): the timer's interval
        is part of the answer."""
        state, now = self.driver.state(), time.monotonic()
        changed = state.version != seen
        warning = cards.render_alert(self.driver.stuck_for())
        if not warning and not changed:
            warning = gr.skip()  # nothing shown (the last new version cleared it)
        slowdown = self.audience.slowdown(request.session_hash, now)
        due = state.version != charts_seen and now - (last_charts or 0) >= (
            CHART_INTERVAL_S * slowdown
        )
        interval = round(TICK_S * slowdown, 2)
        skip = gr.skip()
        if changed:
            me = cards.visitor_owner(request.session_hash)
            deltas = self.driver.deltas(rid) if rid else ()
            text = board_values(state, me, rid, deltas)
        else:
            text = [skip] * 5
        return TickOutputs(
            state.version if changed else skip,
            state.version if due else skip,
            state.version if due and state.compare else skip,
            now if due else skip,
            interval if interval != every else skip,
            warning,
            *text,
        )

    def redraw_charts(self, _version, charts_sent: dict):
        return chart_values(self.driver.state(), self.cache, charts_sent)

    def redraw_compare(self, _version, charts_sent: dict):
        return compare_values(self.driver.state(), self.cache, charts_sent)

    # -- presets and transport -----------------------------------------------------------------
    def pick_scenario(self, key: str):
        """The knobs of a preset (but the scenario itself) and its note."""
        sc = SCENARIOS[key]
        return [*scenario_knobs(self.driver, sc)[1:], note(sc)]

    def start(self, key, num_users, arrival, rate, batching, queue, compare, budget, max_seqs,
              kv_blocks):  # fmt: skip
        sc = SCENARIOS[key]
        try:
            cfg = with_knobs(sc.engine_config(self.driver.base_config), batching, queue, budget,
                             max_seqs, kv_blocks)  # fmt: skip
            workload = sc.workload(int(num_users), arrival, float(rate),
                                   seed=random.randrange(2**31))  # fmt: skip
            sc.start(self.driver, cfg, compare=bool(compare), workload=workload)
        except ValueError as exc:
            warn(f"{KNOBS_REFUSED}: {exc}")
            return gr.skip()
        self.driver.resume()
        return gr.Button("Pause")

    def start_preset(self, key: str):
        """A preset's button: its knobs shown, and started with them."""
        sc = SCENARIOS[key]
        knobs = scenario_knobs(self.driver, sc)
        self.start(*knobs)
        return [*knobs, note(sc), gr.Button("Pause")]

    def toggle_pause(self):
        if self.driver.is_paused:
            self.driver.resume()
            return gr.Button("Pause")
        self.driver.pause()
        return gr.Button("Resume")

    def single_step(self):
        self.driver.pause()
        self.driver.step_once(timeout=30)
        return gr.Button("Resume")

    def reset_board(self, batching, queue, budget, max_seqs, kv_blocks):
        try:
            self.driver.reset(with_knobs(self.driver.base_config, batching, queue, budget,
                                         max_seqs, kv_blocks))  # fmt: skip
        except ValueError as exc:
            warn(f"{KNOBS_REFUSED}: {exc}")
            return gr.skip()
        return gr.Button("Pause") if not self.driver.is_paused else gr.skip()

    def set_pace(self, value: str):
        try:
            self.driver.set_pace(value)
        except ValueError:
            warn(f"pace must be 'max' or a number of steps per second, got {value!r}")

    # -- the visitor's own requests ------------------------------------------------------------
    def submit_prompt(self, text, mt, temp, tp, tk, sd, stop_text, lp, request: gr.Request):
        me = cards.visitor_owner(request.session_hash)
        if not text or not text.strip():
            return gr.skip(), "Type a prompt first."
        try:
            params = public.sampling_params(
                max_tokens=int(mt),
                temperature=float(temp),
                top_p=float(tp),
                top_k=int(tk),
                seed=None if sd is None or sd < 0 else int(sd),
                stop=[s for s in (stop_text or "").split("|") if s],
                logprobs=5 if lp else None,
            )
            handle = public.submit_text(self.driver, text, params, me)
        except (RequestRejected, ValueError) as exc:
            return gr.skip(), warn(f"Refused: {exc}")
        return "", f"Sent as **{cards.esc(handle.request_id)}**: it streams into your card."

    def cancel_mine(self, request: gr.Request):
        self.driver.abort_owner(cards.visitor_owner(request.session_hash))
        return "Cancelled your requests."

    def generate(self, prompt: str, max_tokens: int = 64, temperature: float = 0.7) -> str:
        """Text in, text out: the prompt (as a user turn) joins the board's batch."""
        params = public.sampling_params(max_tokens=int(max_tokens), temperature=float(temperature))
        handle = public.submit_text(self.driver, prompt, params, "gradio_client")
        return handle.result(timeout=600).text

    def leave(self, request: gr.Request):
        self.driver.abort_owner(cards.visitor_owner(request.session_hash))

    # -- the inspector ---------------------------------------------------------------------------
    def list_requests(self, request: gr.Request):
        me = cards.visitor_owner(request.session_hash)
        state = self.driver.state()
        labels = cards.request_labels(state, me)
        ids = [r.request_id for r in reversed(state.records)]
        return gr.Dropdown([(labels.get(i, i), i) for i in ids])

    def inspect_request(self, rid: str | None):
        if not rid:
            return render_inspector(None, (), None)
        self.driver.watch(rid)
        return render_inspector(self.driver.state().details.get(rid), self.driver.deltas(rid), rid)
