"""The board's frame: what every viewer of the live board is sent for one BoardState, built once.

A frame is server-sent events, its bytes prepared once, so sending it to a viewer is a write:
- `board`: {"frame" (its number), "version", "at" (time.time() it was built), "published"
  (time.time() the driver published its BoardState), "stats", "cards", "log", "scoreboard",
  "alert", "stops", "compare" (the compare view shows), "lessons"}, the shared HTML (no
  visitor is "You" in it: a session's own card is its own tick's). "lessons" holds the lesson
  panel of the running preset's run for every guess a viewer can have made (LessonPanels), so
  a session's panel is a lookup of its (preset, run, guess);
- `charts` (twice: the board's charts, then the compare view's): {chart: figure} JSON that
  assets/charts.js draws, only the charts that changed since the last frame, and at most
  every `chart_interval_s` (the browser redraws every chart it gets, which costs far more).
`delta` is what a viewer already on the stream gets; `full` (every chart) is what a viewer that
(re)connects gets first.
"""

import time
from dataclasses import dataclass

import orjson

from playground.board import cards
from playground.board.state import BoardState
from playground.board.views import FigureCache, board_values, chart_values, compare_values
from playground.remote.views import render_banner
from playground.teaching.lessons import LESSONS, render_lesson
from playground.teaching.stop_reasons import render_stop_panel

CHART_INTERVAL_S = 0.5  # the charts in frames at most 2x/s (as the board's own redraws)
CARDS_OPEN = '<div class="pg-cards">'  # render_cards' wrapper: the frame sends what is inside


@dataclass(frozen=True, slots=True)
class Frame:
    number: int  # frames built so far: a new one is an update for every viewer
    version: int  # the BoardState's
    alert: str  # the banner it shows (a frame is built again when only that changed)
    delta: bytes  # the board event, then the charts that changed since the last frame
    full: bytes  # the board event, then every chart


def event(name: str, data: bytes, event_id: int | None = None) -> bytes:
    """One server-sent event; `data` is one line (JSON has no raw newline)."""
    assert b"\n" not in data, "an SSE data line must not hold a newline"
    head = f"event: {name}\n" + (f"id: {event_id}\n" if event_id is not None else "")
    return head.encode() + b"data: " + data + b"\n\n"


def board_alert(state: BoardState, stuck_for: float | None) -> str:
    """The banner above the board: the watchdog's (a step that hangs), else a remote server's."""
    return cards.render_alert(stuck_for) or render_banner(state)


class LessonPanels:
    """The lesson panels of the running preset's run, one per guess ("" skipped), and those of
    the run before it, whose verdict no longer moves (latched, or inconclusive since the reset),
    kept from the frame that first saw the newer run."""

    def __init__(self):
        self._run: tuple[str | None, int] | None = None  # (preset, run) of the last frame
        self._before: list[dict] = []

    def build(self, state: BoardState) -> list[dict]:
        now = (state.workload, state.run)
        if self._run is not None and self._run != now and self._run[0] in LESSONS:
            self._before = [self._panels(state, *self._run)]
        self._run = now
        current = [self._panels(state, *now)] if state.workload in LESSONS else []
        return current + self._before

    @staticmethod
    def _panels(state: BoardState, key: str, run: int) -> dict:
        guesses = ["", *(answer for answer, _ in LESSONS[key].answers)]
        panels = {guess: render_lesson(state, key, guess, run) for guess in guesses}
        return {"key": key, "run": run, "panels": panels}


class FrameBuilder:
    """Builds the frame of each new BoardState; used by one task at a time (not thread-safe)."""

    def __init__(self, chart_interval_s: float = CHART_INTERVAL_S):
        if chart_interval_s < 0:
            raise ValueError(f"chart_interval_s must be >= 0, got {chart_interval_s}")
        self.chart_interval_s = chart_interval_s
        self.cache = FigureCache()
        self.lessons = LessonPanels()
        self.num_frames = 0
        self._sent: dict[str, dict] = {"plots": {}, "compare": {}}  # chart -> revision sent
        self._all_charts = b""  # every chart's events, as of the last chart build
        self._charts_at = float("-inf")
        self._charts_version = -1

    def build(self, state: BoardState, alert: str = "", now: float | None = None) -> Frame:
        """The frame of `state` under `alert`; `now` (monotonic s) decides whether the charts
        are due (they are only for a new version)."""
        now = time.monotonic() if now is None else now
        self.num_frames += 1
        board = self._board_event(state, alert)
        charts = b""
        if self.charts_due(state, now):
            self._charts_at, self._charts_version = now, state.version
            charts = self._chart_events(state)
        full = board + self._all_charts
        return Frame(self.num_frames, state.version, alert, board + charts, full)

    def charts_due(self, state: BoardState, now: float) -> bool:
        """The charts drawn are not `state`'s, and the last ones were sent long enough ago."""
        return state.version != self._charts_version and (
            now - self._charts_at >= self.chart_interval_s
        )

    def _board_event(self, state: BoardState, alert: str) -> bytes:
        stats, cards_html, log, _, scoreboard = board_values(state, None, None, ())
        if cards_html.startswith(CARDS_OPEN) and cards_html.endswith("</div>"):
            cards_html = cards_html[len(CARDS_OPEN) : -len("</div>")]  # into the page's grid
        body = {"frame": self.num_frames, "version": state.version, "at": round(time.time(), 3),
                "published": round(state.published_at, 3), "stats": stats, "cards": cards_html,
                "log": log, "scoreboard": scoreboard, "alert": alert,
                "stops": render_stop_panel(state.snapshot),
                "compare": state.compare, "lessons": self.lessons.build(state)}  # fmt: skip
        return event("board", orjson.dumps(body), self.num_frames)

    def _chart_events(self, state: BoardState) -> bytes:
        """The charts that changed since the last build; keeps every chart's events for `full`."""
        changed, every = [], []
        for name, values in (("plots", chart_values), ("compare", compare_values)):
            self._sent[name], payload = values(state, self.cache, self._sent[name])
            if isinstance(payload, str):  # else gr.skip(): none changed
                changed.append(event("charts", payload.encode()))
            _, payload = values(state, self.cache, {})
            if isinstance(payload, str):
                every.append(event("charts", payload.encode()))
        self._all_charts = b"".join(every)
        return b"".join(changed)
