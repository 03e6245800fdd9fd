"""What the board's events do. Each callback takes component values and returns values or
component updates; the work is the driver's (playground/driver/) and the views' (views.py).

The engine and the driver are shared by every browser session; per-session things (the
visitor's id, the last board version drawn, the request being inspected) come in through
gr.State / gr.Request. `tick` never waits for the driver. The live board is built once per
version for every viewer and reaches each page over the stream (playground/ui/live.py); the
rewind's figures are built once per version too (FigureCache).

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
from playground.access.seat import PRESENTER_PARAM, ControlMode, Role, Seat, SeatView
from playground.access.seat_banner import refusal, render_seat, seat_button
from playground.access.seat_pass import SeatPass
from playground.board import cards
from playground.board.inspector import render_inspector
from playground.board.views import FigureCache
from playground.driver import EngineDriver, RequestRejected
from playground.remote.views import is_remote
from playground.teaching.lessons import LESSONS, render_lesson
from playground.ui.controls import NUM_DRIVE_CONTROLS, Knobs, note, scenario_knobs
from playground.ui.live import lesson_slot, own_charts, own_text, wants_full_rate
from playground.ui.rewind import RewindCallbacks, slider_update
from playground.ui.story import MAX_ANSWERS
from playground.workload.scenarios import SCENARIOS, Scenario

KNOBS_REFUSED = "the engine refused these knobs"


class TickOutputs(NamedTuple):
    """What one tick returns, by name (the wiring lists the components in this order)."""

    version: object  # the board version this session's own things were drawn from
    timer: object  # the timer's interval: the full rate, or rarer for a watcher in a crowd
    board: object  # the visitor's own card (everybody else's come over the stream)
    inspector: object
    own_charts: object  # the inspected request's block table
    stream_pass: object  # the seat's token for the page's board stream ("" none: SeatPass)
    slider: object  # the rewind slider over the steps kept
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


def forget_gradio_session(request: gr.Request) -> None:
    """Drops a closed page's session from Gradio's state holder. Gradio keeps a session's state
    (its own copy of every component an event updated: some 800 Python objects) until 10000
    newer sessions push it out, closed or not, so a Space a few classes visited would hold
    millions of objects, and every full pass of the garbage collector scans them all while it
    holds the GIL from the driver thread. (A request from no Gradio app: nothing to drop.)"""
    holder = getattr(getattr(request.request, "app", None), "state_holder", None)
    if holder is None:
        return
    with holder.lock:
        holder.session_data.pop(request.session_hash, None)
        holder.time_last_used.pop(request.session_hash, None)


class BoardCallbacks:
    def __init__(self, driver: EngineDriver, seat: Seat | None = None,
                 seat_pass: SeatPass | None = None):  # fmt: skip
        self.driver = driver
        self.seat = seat or Seat(on_handover=driver.resume)
        self.seat_pass = seat_pass or SeatPass()  # the holder's full-rate board stream
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
    def arrive(self, seen, rid, every, role, banner, rewound, slider, request: gr.Request):
        """The page's load event: the session becomes a visitor of the board (a presenter
        if its URL carries the presenter key), then its first tick."""
        key = dict(request.query_params or {}).get(PRESENTER_PARAM)
        self.seat.arrive(request.session_hash, time.monotonic(), key)
        return self.tick(seen, rid, every, role, banner, rewound, slider, request)

    def tick(self, seen, rid, every, role, banner, rewound, slider, request: gr.Request):
        """Cheap: never waits for the driver, and nothing follows it. The board comes over the
        stream (playground/ui/live.py); the tick brings this session's own things: its card
        and the request it inspects, the rewind slider's range while it is live, and, when
        they differ from what the page shows (`role`, `banner`: the page's own values, so a
        late answer never leaves the page out of date), the seat banner and role. The timer's
        interval is part of the answer (Audience): the full rate for a session with something
        live of its own, rarer for a watcher in a crowd. `rewound`: the step this session
        looks at (None: live)."""
        state, now = self.driver.state(), time.monotonic()
        session = request.session_hash
        self.seat.seen(session, now)
        view = self.seat.view(session, now)
        me = cards.visitor_owner(session)
        holds = view.role is Role.DRIVER and self.seat.mode is not ControlMode.OPEN
        full = wants_full_rate(state, me, rid, rewound, view.role, holds)
        stream_pass = self._stream_pass(session, holds)
        interval = self.audience.interval(session, now, full)
        skip = gr.skip()
        board, inspector, figures = skip, skip, skip
        changed = state.version != seen and rewound is None
        if changed:
            board, inspector = own_text(state, me, rid, self.driver.deltas(rid) if rid else ())
            figures = own_charts(state, rid, self.cache) if rid else skip
        window = self.driver.history.steps()
        live_end = rewound is None and window is not None and slider != window[1]
        running = "paused" if state.paused else "running"
        shown = render_seat(view, state.paused_until, now), f"{view.role.value}:{running}"
        return TickOutputs(
            state.version if changed else skip,
            interval if interval != every else skip,
            board,
            inspector,
            figures,
            stream_pass,
            slider_update(window) if live_end else skip,
            *self._seat_outputs(view.role, shown, (banner, role)),
        )

    def _stream_pass(self, session: str, holds: bool) -> str:
        """The token that gets the holder's board stream every frame; "" for anyone else."""
        if holds:
            return self.seat_pass.issue(session)
        self.seat_pass.revoke(session)
        return ""

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
        """A preset's button: its knobs and its question; the run starts with an answer (a
        control action: the seat's). A session that may drive also clears the shared board to
        the preset's engines with no users yet, so the run before it (its cards, preemptions,
        charts) cannot answer the question first; any other session only reads the question.
        [knobs, note, pause, lesson, panel, answer buttons, skip button]"""
        session = self._visitor(request)
        sc = SCENARIOS[key]
        if self.seat.view(session, time.monotonic()).role.may_drive and self._drives(request):
            self._clear_for(sc)
        panel = render_lesson(self.driver.state(), key, None)
        lesson = {"key": key, "guess": None}
        return [*scenario_knobs(self.driver, sc), note(sc), gr.skip(), lesson, panel,
                *_answer_buttons(key)]  # fmt: skip

    def _clear_for(self, sc: Scenario) -> None:
        """Fresh engines of the preset's knobs and no workload: the board before its run."""
        try:
            self.driver.reset(sc.engine_config(self.driver.base_config), compare=sc.compare)
        except ValueError as exc:
            warn(f"{KNOBS_REFUSED}: {exc}")

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
        panel = lesson_slot(render_lesson(state, key, guess, state.run), key, state.run, guess)
        return [*started, lesson, panel, *hidden]  # the stream's frames carry it on

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

    def toggle_seat(self, role: str, banner: str, request: gr.Request):
        """The seat button: take, give up, queue, leave the queue; the seat banner and role
        at once (a watcher's own tick may be seconds away)."""
        self._visitor(request)
        session, now = request.session_hash, time.monotonic()
        try:
            self.seat.toggle(session, now)
        except RateLimited as exc:
            warn(f"Slow down: {exc}")
        view, state = self.seat.view(session, now), self.driver.state()
        running = "paused" if state.paused else "running"
        shown = render_seat(view, state.paused_until, now), f"{view.role.value}:{running}"
        return self._seat_outputs(view.role, shown, (banner, role))

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
        """The page closed: its requests are cancelled, its seat passes on, Gradio forgets it."""
        self.seat.leave(request.session_hash, time.monotonic())
        self.seat_pass.revoke(request.session_hash)
        self.driver.abort_owner(cards.visitor_owner(request.session_hash))
        forget_gradio_session(request)

    # -- the inspector ---------------------------------------------------------------------------
    def list_requests(self, request: gr.Request):
        me = cards.visitor_owner(self._visitor(request))
        state = self.driver.state()
        labels = cards.request_labels(state, me)
        ids = [r.request_id for r in reversed(state.records)]
        return gr.Dropdown([(labels.get(i, i), i) for i in ids])

    def inspect_request(self, rid: str | None, request: gr.Request):
        """The inspector and the request's block table (none: the board's pick comes back)."""
        self._visitor(request)
        if not rid:
            return render_inspector(None, (), None), ""
        try:  # the driver's answer, not the last BoardState: a tick may already draw newer
            detail = self.driver.watch(rid)
        except TimeoutError:  # a stuck driver (the board says so): what it last published
            detail = self.driver.state().details.get(rid)
        charts = own_charts(self.driver.state(), rid, self.cache)
        return render_inspector(detail, self.driver.deltas(rid), rid), charts


def _answer_buttons(key: str) -> list:
    """The lesson's answers on its buttons (the spare ones hidden), then the skip button."""
    answers = LESSONS[key].answers if key in LESSONS else ()
    buttons = [
        gr.Button(answers[i][1], visible=True) if i < len(answers) else gr.Button(visible=False)
        for i in range(MAX_ANSWERS)
    ]
    return [*buttons, gr.Button(visible=bool(answers))]
