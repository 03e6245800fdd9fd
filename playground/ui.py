"""The board: `build_ui(driver) -> gr.Blocks`. Layout first, callbacks and wiring after.

The engine and the driver are shared by every browser session; per-session things (the
visitor's id, the last board version drawn, the request being inspected) live in gr.State /
gr.Request. One gr.Timer refreshes everything from the driver's latest BoardState and never
waits for the driver. Figures are built once per board version and shared by all sessions.
"""

import random
import time
from dataclasses import replace
from pathlib import Path

import gradio as gr
from gradio.components.plot import PlotData

from engine import EngineConfig
from playground import cards, public
from playground.audience import Audience
from playground.driver import EngineDriver, RequestRejected
from playground.inspector import render_inspector
from playground.scenarios import DEFAULT_SCENARIO, SCENARIOS, Scenario
from playground.users import ARRIVALS
from playground.views import (
    COMPARE_KEYS,
    PLOT_KEYS,
    FigureCache,
    board_values,
    chart_values,
    compare_values,
)

ASSETS = Path(__file__).resolve().parent.parent / "assets"
TICK_S = 0.25  # ~4 Hz
CHART_INTERVAL_S = 0.5  # charts redraw at most 2x/s: the browser's Plotly redraws are the cost
KNOBS_REFUSED = "the engine refused these knobs"
PACES = ["max", "0.5", "1", "2", "5", "10"]
INTRO = """
<div class="pg-hero"><h1>Continuous batching, live</h1>
<p>Simulated users and <b>you</b> share <b>one</b> LLM engine running in this process. Every
step the scheduler picks which sequences run and how many of their tokens fit the budget, then
does <b>one</b> forward pass for all of them over a paged KV cache. Nothing here is animated:
the charts are measured from real model forwards.</p></div>
"""


def _scenario_knobs(driver: EngineDriver, sc: Scenario) -> list:
    """Control values for a preset: its overrides on top of the command line's config."""
    base, o = driver.base_config, sc.engine_overrides
    kv = o.get("num_kv_blocks", base.num_kv_blocks or driver.snapshot().kv_blocks_total)
    return [
        sc.key,
        sc.num_users,
        sc.arrival,
        sc.arrival_rate,
        o.get("scheduling_policy", base.scheduling_policy),
        sc.compare,
        o.get("max_num_batched_tokens", base.max_num_batched_tokens),
        o.get("max_num_seqs", base.max_num_seqs),
        kv,
        _note(sc),
    ]


def _html(value: str = "", **kwargs) -> gr.HTML:
    """gr.HTML without the click handler Gradio attaches on every update by default."""
    return gr.HTML(value, js_on_load=None, **kwargs)


def _with_knobs(cfg: EngineConfig, pol, bud, seqs, kv) -> EngineConfig:
    """`cfg` with the board's engine knobs; ValueError (from EngineConfig) naming a bad one."""
    return replace(
        cfg,
        scheduling_policy=pol,
        max_num_batched_tokens=int(bud),
        max_num_seqs=int(seqs),
        num_kv_blocks=int(kv),
    )


def _warn(message: str) -> str:
    """Toast `message` and return it for the page, escaped: Gradio renders toasts and Markdown
    as HTML, and a refusal can quote what the visitor typed (a stop string, a pace)."""
    message = cards.esc(message)
    gr.Warning(message)
    return message


def _plot(key: str, first: dict[str, str], **kwargs) -> gr.Plot:
    """A chart's place on the page, `#pg-plot-<key>`. gr.Plot draws only its first figure (and
    loads plotly.js); later ones come as JSON through assets/charts.js, which draws in place."""
    figure = PlotData(type="plotly", plot=first.get(key, '{"data": [], "layout": {}}'))
    return gr.Plot(figure, show_label=False, elem_id=f"pg-plot-{key}", **kwargs)


def _note(sc: Scenario) -> str:
    return f'<div class="pg-note"><b>{cards.esc(sc.title)}.</b> {cards.esc(sc.what_to_watch)}</div>'


def build_ui(driver: EngineDriver) -> gr.Blocks:
    cache = FigureCache()
    audience = Audience()
    sc0 = SCENARIOS[DEFAULT_SCENARIO]
    k0 = _scenario_knobs(driver, sc0)
    first, _ = cache.get(driver.state())
    with gr.Blocks(title="Continuous batching playground") as demo:
        # The timer moves these hidden versions when the board changed, and their .change events
        # redraw: the text every tick, the charts at most every CHART_INTERVAL_S (the browser
        # redraws every chart it gets). One tick returning every figure, gr.skip() for the
        # unchanged ones, would cost Gradio ~1 ms per skipped output on every tick.
        version = gr.Number(-1, visible=False)
        chart_version = gr.Number(-1, visible=False)
        compare_version = gr.Number(-1, visible=False)
        charts_at = gr.State(0.0)  # time.monotonic() of this session's last chart redraw
        sent = gr.State({})  # chart -> revision this session has
        sent_compare = gr.State({})
        with gr.Row(elem_classes="pg-top"):
            _html(INTRO)
            stats = _html(elem_id="pg-stats")
        alert = _html(elem_id="pg-alert")  # the watchdog's word when a step hangs
        with gr.Row(equal_height=False):
            with gr.Column(scale=1, min_width=320, elem_classes="pg-side"):
                gr.Markdown("#### Presets: one click starts one", elem_classes="pg-h")
                preset_buttons = {
                    key: gr.Button(sc.title, size="sm", elem_classes="pg-preset")
                    for key, sc in SCENARIOS.items()
                }
                note = _html(k0[-1])
                with gr.Row(elem_classes="pg-transport"):
                    start_btn = gr.Button(
                        "▶ Start", variant="primary", size="sm", min_width=60, elem_id="pg-start"
                    )
                    pause_btn = gr.Button("Pause", size="sm", min_width=60, elem_id="pg-pause")
                    step_btn = gr.Button("Step", size="sm", min_width=60, elem_id="pg-step")
                    reset_btn = gr.Button(
                        "Reset", size="sm", variant="stop", min_width=60, elem_id="pg-reset"
                    )
                pace0 = driver.state().pace
                pace = gr.Dropdown(
                    PACES,
                    value="max" if pace0 is None else f"{pace0:g}",
                    allow_custom_value=True,
                    label="pace: steps per second",
                )
                with gr.Accordion("Workload and engine knobs", open=False):
                    scenario = gr.Dropdown(
                        [(s.title, k) for k, s in SCENARIOS.items()], value=k0[0], label="scenario"
                    )
                    num_users = gr.Slider(1, 32, value=k0[1], step=1, label="simulated users")
                    arrival = gr.Radio(list(ARRIVALS), value=k0[2], label="arrivals")
                    rate = gr.Slider(0.2, 10, value=k0[3], step=0.1, label="arrival rate (users/s)")
                    policy = gr.Radio(["continuous", "static"], value=k0[4], label="policy")
                    compare = gr.Checkbox(k0[5], label="compare static vs continuous")
                    budget = gr.Slider(16, 2048, value=k0[6], step=16, label="token budget / step")
                    max_seqs = gr.Slider(1, 64, value=k0[7], step=1, label="max sequences per step")
                    kv_blocks = gr.Slider(8, 4096, value=k0[8], step=8, label="KV blocks")
                gr.Markdown("#### Your prompt", elem_classes="pg-h")
                prompt = gr.Textbox(
                    placeholder="Ask anything. It joins the same batch.",
                    lines=2,
                    show_label=False,
                    elem_id="pg-prompt",
                )
                with gr.Accordion("Sampling", open=False):
                    max_tokens = gr.Slider(
                        1,
                        min(256, driver.limits.max_tokens),
                        value=min(48, driver.limits.max_tokens),
                        step=1,
                        label="max_tokens",
                        elem_id="pg-max-tokens",
                    )
                    temperature = gr.Slider(0, 2, value=0.7, step=0.05, label="temperature")
                    top_p = gr.Slider(0.05, 1, value=0.95, step=0.05, label="top_p")
                    top_k = gr.Slider(0, 100, value=0, step=1, label="top_k (0 = off)")
                    seed = gr.Number(-1, precision=0, label="seed (-1 = random)")
                    stop = gr.Textbox("", label="stop strings, separated by |")
                    logprobs = gr.Checkbox(True, label="logprobs: hover a token of your answer")
                with gr.Row():
                    send_btn = gr.Button("Send", variant="primary", size="sm", elem_id="pg-send")
                    cancel_btn = gr.Button("Cancel mine", size="sm")
                send_status = gr.Markdown("", elem_id="pg-send-status")
            with gr.Column(scale=3):
                board = _html(elem_id="pg-board")
                for row in (PLOT_KEYS[:2], PLOT_KEYS[2:4], PLOT_KEYS[4:]):
                    with gr.Row():
                        for key in row:
                            _plot(key, first, elem_classes="pg-plot")
        with gr.Tabs():
            with gr.Tab("Step log"):
                log = _html(elem_id="pg-log")
            with gr.Tab("Sequence inspector") as insp_tab:
                with gr.Row():
                    inspect_rid = gr.Dropdown([], label="request", allow_custom_value=True, scale=4)
                    refresh_ids = gr.Button("↻ list requests", size="sm", scale=1)
                inspector = _html()
            with gr.Tab("Compare: static vs continuous"):
                scoreboard = _html()
                for row in (COMPARE_KEYS[:2], COMPARE_KEYS[2:]):
                    with gr.Row():
                        for key in row:
                            _plot(key, first)
        figures = gr.Textbox(visible=False)  # {chart: figure} JSON for assets/charts.js
        compare_figures = gr.Textbox(visible=False)
        timer = gr.Timer(TICK_S)

        # -- callbacks ------------------------------------------------------------------------
        knobs = [scenario, num_users, arrival, rate, policy, compare, budget, max_seqs, kv_blocks]
        board_outputs = [stats, board, log, inspector, scoreboard]
        versions = [version, chart_version, compare_version, charts_at, timer]

        def tick(seen, charts_seen, last_charts, rid, every, request: gr.Request):
            """Cheap: never waits for the driver. The text comes with the tick; the charts
            come through chart_version's change event, at most every CHART_INTERVAL_S. Both
            come more rarely while many people watch (see Audience): the timer's interval
            is part of the answer."""
            state, now = driver.state(), time.monotonic()
            warning = cards.render_alert(driver.stuck_for())
            if not warning and state.version == seen:
                warning = gr.skip()  # nothing shown (the last new version cleared it)
            slowdown = audience.slowdown(request.session_hash, now)
            due = (
                state.version != charts_seen
                and now - (last_charts or 0) >= CHART_INTERVAL_S * slowdown
            )
            interval = round(TICK_S * slowdown, 2)
            versions = [
                state.version if state.version != seen else gr.skip(),
                state.version if due else gr.skip(),
                state.version if due and state.compare else gr.skip(),
                now if due else gr.skip(),
                interval if interval != every else gr.skip(),
            ]
            if state.version == seen:
                return [*versions, warning] + [gr.skip()] * len(board_outputs)
            me = cards.visitor_owner(request.session_hash)
            deltas = driver.deltas(rid) if rid else ()
            return [*versions, warning, *board_values(state, me, rid, deltas)]

        def redraw_charts(_version, charts_sent: dict):
            return chart_values(driver.state(), cache, charts_sent)

        def redraw_compare(_version, charts_sent: dict):
            return compare_values(driver.state(), cache, charts_sent)

        def pick_scenario(key: str):
            return _scenario_knobs(driver, SCENARIOS[key])[1:]

        def start(key, n, arr, r, pol, cmp, bud, seqs, kv):
            sc = SCENARIOS[key]
            overrides = {k: v for k, v in sc.engine_overrides.items()
                         if k in EngineConfig.field_names()}  # fmt: skip
            try:
                cfg = _with_knobs(replace(driver.base_config, **overrides), pol, bud, seqs, kv)
                workload = sc.workload(int(n), arr, float(r), seed=random.randrange(2**31))
                driver.reset(cfg, compare=bool(cmp), workload=workload)
            except ValueError as exc:
                _warn(f"{KNOBS_REFUSED}: {exc}")
                return gr.skip()
            driver.resume()
            return gr.Button("Pause")

        def start_preset(key: str):
            values = _scenario_knobs(driver, SCENARIOS[key])
            start(*values[:-1])
            return [*values, gr.Button("Pause")]

        def toggle_pause():
            if driver.is_paused:
                driver.resume()
                return gr.Button("Pause")
            driver.pause()
            return gr.Button("Resume")

        def single_step():
            driver.pause()
            driver.step_once(timeout=30)
            return gr.Button("Resume")

        def reset_board(pol, bud, seqs, kv):
            try:
                driver.reset(_with_knobs(driver.base_config, pol, bud, seqs, kv))
            except ValueError as exc:
                _warn(f"{KNOBS_REFUSED}: {exc}")
                return gr.skip()
            return gr.Button("Pause") if not driver.is_paused else gr.skip()

        def submit_prompt(text, mt, temp, tp, tk, sd, stop_text, lp, request: gr.Request):
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
                handle = public.submit_text(driver, text, params, me)
            except (RequestRejected, ValueError) as exc:
                return gr.skip(), _warn(f"Refused: {exc}")
            return "", f"Sent as **{cards.esc(handle.request_id)}**: it streams into your card."

        def cancel_mine(request: gr.Request):
            driver.abort_owner(cards.visitor_owner(request.session_hash))
            return "Cancelled your requests."

        def list_requests(request: gr.Request):
            me = cards.visitor_owner(request.session_hash)
            state = driver.state()
            labels = cards.request_labels(state, me)
            ids = [r.request_id for r in reversed(state.records)]
            return gr.Dropdown([(labels.get(i, i), i) for i in ids])

        def inspect_request(rid: str | None):
            if rid:
                driver.watch(rid)
            return (
                render_inspector(driver.state().details.get(rid), driver.deltas(rid), rid)
                if rid
                else render_inspector(None, (), None)
            )

        def set_pace(value: str):
            try:
                driver.set_pace(value)
            except ValueError:
                _warn(f"pace must be 'max' or a number of steps per second, got {value!r}")

        def generate(prompt: str, max_tokens: int = 64, temperature: float = 0.7) -> str:
            """Text in, text out: the prompt (as a user turn) joins the board's batch."""
            params = public.sampling_params(
                max_tokens=int(max_tokens), temperature=float(temperature)
            )
            handle = public.submit_text(driver, prompt, params, "gradio_client")
            return handle.result(timeout=600).text

        def leave(request: gr.Request):
            driver.abort_owner(cards.visitor_owner(request.session_hash))

        # -- wiring ---------------------------------------------------------------------------
        hidden = dict(show_progress="hidden", queue=False)
        tick_inputs = [version, chart_version, charts_at, inspect_rid, timer]
        timer.tick(tick, tick_inputs, [*versions, alert, *board_outputs], **hidden)
        demo.load(tick, tick_inputs, [*versions, alert, *board_outputs], show_progress="hidden")
        chart_version.change(redraw_charts, [chart_version, sent], [sent, figures], **hidden)
        compare_version.change(redraw_compare, [compare_version, sent_compare],
                               [sent_compare, compare_figures], **hidden)  # fmt: skip
        draw = load_asset("charts.js")
        figures.change(None, figures, None, js=draw, **hidden)
        compare_figures.change(None, compare_figures, None, js=draw, **hidden)
        demo.unload(leave)
        gr.api(generate, api_name="generate", concurrency_limit=None)
        scenario.change(pick_scenario, scenario, knobs[1:] + [note], show_progress="hidden")
        start_btn.click(start, knobs, pause_btn)
        for key, btn in preset_buttons.items():
            btn.click(lambda key=key: start_preset(key), None, [*knobs, note, pause_btn])
        pause_btn.click(toggle_pause, None, pause_btn)
        step_btn.click(single_step, None, pause_btn)
        reset_btn.click(reset_board, [policy, budget, max_seqs, kv_blocks], pause_btn)
        pace.change(set_pace, pace, None)
        send = [prompt, max_tokens, temperature, top_p, top_k, seed, stop, logprobs]
        send_btn.click(submit_prompt, send, [prompt, send_status])
        prompt.submit(submit_prompt, send, [prompt, send_status])
        cancel_btn.click(cancel_mine, None, send_status)
        refresh_ids.click(list_requests, None, inspect_rid)
        insp_tab.select(list_requests, None, inspect_rid)
        inspect_rid.change(inspect_request, inspect_rid, inspector)
    return demo


def load_asset(name: str) -> str:
    """A file of assets/ as text (the page's style.css, the charts' charts.js)."""
    return (ASSETS / name).read_text(encoding="utf-8")
