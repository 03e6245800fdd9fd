"""What the board's events do. Each callback takes component values and returns values or
component updates; the work is the driver's (playground/driver/) and the views' (views.py).

The engine and the driver are shared by every browser session; per-session things (the
visitor's id, the last board version drawn, the request being inspected) come in through
gr.State / gr.Request. `tick` never waits for the driver. Figures are built once per board
version and shared by all sessions (FigureCache).

Every handler but the timer's answers only sessions of the board's page (those whose load
event ran: `arrive`); the controls also ask the Seat (playground/access/seat.py) whether this
session drives, and spend one token of its rate limit.
"""

import random
import time
from dataclasses import replace
from typing import NamedTuple

import gradio as gr

from engine import EngineConfig
from playground.access import public
from playground.access.audience import Audience
from playground.access.rate_limit import RateLimited
from playground.access.seat import PRESENTER_PARAM, Role, Seat, SeatView
from playground.access.seat_banner import refusal, render_seat, seat_button
from playground.board import cards
from playground.board.inspector import render_inspector
from playground.board.views import FigureCache, board_values, chart_values, compare_values
from playground.driver import EngineDriver, RequestRejected
from playground.remote.views import is_remote, render_banner
from playground.teaching.lessons import LESSONS, render_lesson
from playground.teaching.stop_reasons import render_stop_panel
from playground.ui.controls import NUM_DRIVE_CONTROLS, Knobs, note, scenario_knobs
from playground.ui.rewind import RewindCallbacks, slider_update
from playground.ui.story import MAX_ANSWERS
from playground.workload.scenarios import SCENARIOS

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
    seat: object  # the seat banner
    role: object  # "<Role>:paused|running" of this session, when it changed


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
    def __init__(self, driver: EngineDriver, seat: Seat | None = None):
        self.driver = driver
        self.seat = seat or Seat(on_handover=driver.resume)
        self.cache = FigureCache()
        self.replays = RewindCallbacks(driver, self.cache)  # the rewind bar and the run's files
        self.audience = Audience()

    # -- who may ask -----------------------------------------------------------------------
    def _visitor(self, request: gr.Request) -> str:
        """The session of a page of the board; gr.Error for a call from anywhere else."""
        if not self.seat.is_visitor(request.session_hash):
            raise gr.Error(refusal(SeatView(self.seat.mode, Role.STRANGER)))
        return request.session_hash

    def _drives(self, request: gr.Request) -> bool:
        """May this control action go ahead? Warns why not (the seat, the rate limit)."""
        session, now = request.session_hash, time.monotonic()
        try:
            role = self.seat.act(session, now)
        except RateLimited as exc:
            warn(f"Slow down: {exc}")
            return False
        if role is Role.STRANGER:
            self._visitor(request)  # raises
        if role is not Role.DRIVER:
            warn(f"Not yours to drive: {refusal(self.seat.view(session, now))}")
            return False
        return True

    # -- refresh ---------------------------------------------------------------------------
    def arrive(self, seen, charts_seen, last_charts, rid, every, role, banner,
               request: gr.Request, rewound=None):  # fmt: skip
        """The page's load event: the session becomes a visitor of the board (a presenter
        if its URL carries the presenter key), then its first tick."""
        key = dict(request.query_params or {}).get(PRESENTER_PARAM)
        self.seat.arrive(request.session_hash, time.monotonic(), key)
        return self.tick(seen, charts_seen, last_charts, rid, every, role, banner, request,
                         rewound)  # fmt: skip

    def tick(self, seen, charts_seen, last_charts, rid, every, role, banner, request: gr.Request,
             rewound=None):  # fmt: skip
        """Cheap: never waits for the driver. The text comes with the tick; the charts
        come through chart_version's change event, at most every CHART_INTERVAL_S. Both
        come more rarely while many people watch (see Audience): the timer's interval
        is part of the answer. The seat banner and the role key come when they differ from
        what the page shows (`role`, `banner`: the page's own values, so a late answer
        can never leave the page out of date). While this session looks at an earlier step
        (`rewound`), the board is left as it is."""
        state, now = self.driver.state(), time.monotonic()
        session = request.session_hash
        self.seat.seen(session, now)
        view = self.seat.view(session, now)
        running = "paused" if state.paused else "running"
        role_now = f"{view.role.value}:{running}"
        banner_now = render_seat(view, state.paused_until, now)
        changed = state.version != seen and rewound is None
        warning = cards.render_alert(self.driver.stuck_for()) or render_banner(state)
        if not warning and not changed:
            warning = gr.skip()  # nothing shown (the last new version cleared it)
        slowdown = self.audience.slowdown(request.session_hash, now)
        due = (
            rewound is None
            and state.version != charts_seen
            and now - (last_charts or 0) >= (CHART_INTERVAL_S * slowdown)
        )
        interval = round(TICK_S * slowdown, 2)
        skip = gr.skip()
        if changed:
            me = cards.visitor_owner(request.session_hash)
            deltas = self.driver.deltas(rid) if rid else ()
            text = board_values(state, me, rid, deltas)
            if not rid:  # the inspector is inspect_request's until one is picked
                text[3] = skip
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
            *self._seat_outputs(view.role, (banner_now, role_now), (banner, role)),
        )

    @staticmethod
    def _seat_outputs(role: Role, now: tuple[str, str], shown: tuple[str, str]) -> list:
        """The banner and the role key, each where it changed; nothing for a session whose
        load event has not run yet (its controls stay as they are until it has)."""
        if role is Role.STRANGER:
            return [gr.skip()] * 2
        return [new if new != old else gr.skip() for new, old in zip(now, shown, strict=True)]

    def show_role(self, key: str) -> list:
        """This session's role or the board's pause changed: the Pause button, what else the
        session may use, and the seat button."""
        name, _, running = key.partition(":")
        role = Role(name)
        button = seat_button(SeatView(self.seat.mode, role))
        label = "Resume" if running == "paused" else "Pause"
        pause = gr.update(value=label, interactive=role.may_drive)
        updates = [gr.update(interactive=role.may_drive) for _ in range(NUM_DRIVE_CONTROLS)]
        return [pause, *updates, gr.update(value=button or "", visible=button is not None)]

    def redraw_charts(self, _version, charts_sent: dict, rid: str | None = None):
        """The charts the session lacks (the block table of the request it inspects, `rid`),
        and the rewind slider over the steps kept."""
        state = self.driver.state()
        return [*chart_values(state, self.cache, charts_sent, rid),
                slider_update(self.driver.history.steps())]  # fmt: skip

    def redraw_compare(self, _version, charts_sent: dict):
        return compare_values(self.driver.state(), self.cache, charts_sent)

    # -- presets and transport -----------------------------------------------------------------
    def pick_scenario(self, key: str, request: gr.Request):
        """The knobs of a preset (but the scenario itself) and its note."""
        self._visitor(request)
        sc = SCENARIOS[key]
        return [*scenario_knobs(self.driver, sc)[1:], note(sc, is_remote(self.driver.state()))]

    def start(self, key, num_users, arrival, rate, batching, queue, compare, budget, max_seqs,
              kv_blocks, request: gr.Request):  # fmt: skip
        if not self._drives(request):
            return gr.skip()
        return self._start(key, num_users, arrival, rate, batching, queue, compare, budget,
                           max_seqs, kv_blocks)  # fmt: skip

    def _start(self, key, num_users, arrival, rate, batching, queue, compare, budget, max_seqs,
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

    def _start_preset(self, key: str) -> list:
        """A preset started with its own knobs: the knobs, its note, the Pause button."""
        sc = SCENARIOS[key]
        knobs = scenario_knobs(self.driver, sc)
        self._start(*knobs)
        return [*knobs, note(sc, is_remote(self.driver.state())), gr.Button("Pause")]

    # -- lessons: a preset asks first -------------------------------------------------------
    def open_lesson(self, key: str, request: gr.Request):
        """A preset's button: its knobs and its question, on this page only; the run starts
        with an answer (a control action: the seat's). [knobs, note, pause, lesson, panel,
        answer buttons, skip button]"""
        self._visitor(request)
        sc = SCENARIOS[key]
        panel = render_lesson(self.driver.state(), key, None)
        lesson = {"key": key, "guess": None}
        return [*scenario_knobs(self.driver, sc), note(sc), gr.skip(), lesson, panel,
                *_answer_buttons(key)]  # fmt: skip

    def answer_lesson(self, index: int, lesson: dict, request: gr.Request):
        """The visitor picked answer `index` (-1: skipped the question): the preset starts.
        Refused (not this session's to drive), the question stays open."""
        key = (lesson or {}).get("key")
        if not self._drives(request) or key not in LESSONS:
            return [gr.skip()] * (len(Knobs._fields) + 4 + MAX_ANSWERS + 1)
        answers = LESSONS[key].answers
        guess = answers[index][0] if 0 <= index < len(answers) else ""
        started = self._start_preset(key)
        state = self.driver.state()  # the fresh run's: its verdict is this lesson's
        lesson = {"key": key, "guess": guess, "run": state.run}
        hidden = [gr.Button(visible=False)] * (MAX_ANSWERS + 1)
        return [*started, lesson, render_lesson(state, key, guess, state.run), *hidden]

    def refresh_story(self, _version, lesson: dict | None):
        """With the charts: this session's lesson, the stop reasons read aloud, and the
        comparison shown while compare mode runs."""
        state = self.driver.state()
        lesson = lesson or {}
        return [
            render_lesson(state, lesson.get("key"), lesson.get("guess"), lesson.get("run")),
            render_stop_panel(state.snapshot),
            gr.Column(visible=state.compare),
        ]

    def toggle_pause(self, request: gr.Request):
        if not self._drives(request):
            return gr.skip()
        if self.driver.is_paused:
            self.driver.resume()
            return gr.Button("Pause")
        self.driver.pause()
        return gr.Button("Resume")

    def single_step(self, request: gr.Request):
        if not self._drives(request):
            return gr.skip()
        self.driver.pause()
        self.driver.step_once(timeout=30)
        return gr.Button("Resume")

    def reset_board(self, batching, queue, budget, max_seqs, kv_blocks, request: gr.Request):
        if not self._drives(request):
            return gr.skip()
        try:
            self.driver.reset(with_knobs(self.driver.base_config, batching, queue, budget,
                                         max_seqs, kv_blocks))  # fmt: skip
        except ValueError as exc:
            warn(f"{KNOBS_REFUSED}: {exc}")
            return gr.skip()
        return gr.Button("Pause") if not self.driver.is_paused else gr.skip()

    def set_pace(self, value: str, request: gr.Request):
        if not self._drives(request):
            return
        try:
            self.driver.set_pace(value)
        except ValueError as exc:
            warn(str(exc))

    def run_replay(self, path, mode: str, request: gr.Request):
        """An uploaded replay file runs on the shared engine (a reset): the seat's to do."""
        if not self._drives(request):
            return gr.skip(), gr.skip()
        return self.replays.run_replay(path, mode)

    def toggle_seat(self, request: gr.Request):
        """The seat button: take, give up, queue, leave the queue (the next tick shows it)."""
        self._visitor(request)
        try:
            self.seat.toggle(request.session_hash, time.monotonic())
        except RateLimited as exc:
            warn(f"Slow down: {exc}")

    # -- the visitor's own requests ------------------------------------------------------------
    def submit_prompt(self, text, mt, temp, tp, tk, sd, stop_text, lp, request: gr.Request):
        me = cards.visitor_owner(self._visitor(request))
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
        self.driver.abort_owner(cards.visitor_owner(self._visitor(request)))
        return "Cancelled your requests."

    def generate(self, prompt: str, max_tokens: int = 64, temperature: float = 0.7) -> str:
        """Text in, text out: the prompt (as a user turn) joins the board's batch."""
        params = public.sampling_params(max_tokens=int(max_tokens), temperature=float(temperature))
        handle = public.submit_text(self.driver, prompt, params, "gradio_client")
        return handle.result(timeout=600).text

    def leave(self, request: gr.Request):
        """The page closed: its requests are cancelled, its seat passes on."""
        self.seat.leave(request.session_hash, time.monotonic())
        self.driver.abort_owner(cards.visitor_owner(request.session_hash))

    # -- the inspector ---------------------------------------------------------------------------
    def list_requests(self, request: gr.Request):
        me = cards.visitor_owner(self._visitor(request))
        state = self.driver.state()
        labels = cards.request_labels(state, me)
        ids = [r.request_id for r in reversed(state.records)]
        return gr.Dropdown([(labels.get(i, i), i) for i in ids])

    def inspect_request(self, rid: str | None, request: gr.Request):
        self._visitor(request)
        if not rid:
            return render_inspector(None, (), None)
        try:  # the driver's answer, not the last BoardState: a tick may already draw newer
            detail = self.driver.watch(rid)
        except TimeoutError:  # a stuck driver (the board says so): what it last published
            detail = self.driver.state().details.get(rid)
        return render_inspector(detail, self.driver.deltas(rid), rid)


def _answer_buttons(key: str) -> list:
    """The lesson's answers on its buttons (the spare ones hidden), then the skip button."""
    answers = LESSONS[key].answers if key in LESSONS else ()
    buttons = [
        gr.Button(answers[i][1], visible=True) if i < len(answers) else gr.Button(visible=False)
        for i in range(MAX_ANSWERS)
    ]
    return [*buttons, gr.Button(visible=bool(answers))]
