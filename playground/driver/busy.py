"""The engine-busy clock: the board's times count only the seconds the engine spent in steps.

The engine stamps its times with time.monotonic(), so a pause, the wait between two single
steps or a slow pace would count as waiting, as time to first token, and as time "lost to
preemption". The board reads every time on the engine-busy clock instead, the one the
scoreboard's finish times use (seconds inside steps that did work, the engine's
`Totals.elapsed_busy`): a wall time inside a step maps to the busy seconds up to that moment,
a wall time between steps to the busy seconds at the end of the step before.

BusyClock is that mapping for one snapshot's step window (its last MAX_STEP_RECORDS steps: a
time older than the window maps to the window's start). BusyTime (driver thread only) turns
each snapshot the board gets into one on that clock, keeping what a request's finish fixed
(its times, its share of the run's latency samples and preemption loss) once it finished.
"""

from bisect import bisect_left, bisect_right
from collections import deque
from dataclasses import replace
from itertools import takewhile

from engine import EngineSnapshot
from engine.telemetry import MAX_LATENCY_SAMPLES, RequestState, StepRecord, percentile


class BusyClock:
    """Wall time (time.monotonic()) -> engine-busy seconds since the engine started.

    Kept per step: its start, its busy duration (0 for a step that did no work) and the busy
    seconds before it, as an offset plus a running sum from the clock's first step, so a
    later window of the same engine only appends its new steps and drops its old ones
    (`advance`) instead of summing the whole window again."""

    __slots__ = ("_cum", "_durations", "_numbers", "_offset", "_starts", "end")

    def __init__(self, steps: tuple[StepRecord, ...], elapsed_busy: float):
        self._numbers, self._starts, self._durations, self._cum = [], [], [], []
        self.advance(steps, elapsed_busy)

    def advance(self, steps: tuple[StepRecord, ...], elapsed_busy: float) -> None:
        """In place: the clock of `steps`, a window that follows on from this one (else it is
        built afresh): steps newer than its last are appended, older than the window's first
        dropped; the window starts at elapsed_busy less the window's busy seconds."""
        numbers = self._numbers
        if steps and numbers and steps[0].step >= numbers[0] and steps[-1].step >= numbers[-1]:
            new = newer_than(steps, numbers[-1])
            drop = bisect_left(numbers, steps[0].step)
        else:
            new, drop = steps, len(numbers)
        for name in ("_numbers", "_starts", "_durations", "_cum"):
            del getattr(self, name)[:drop]
        total = self._cum[-1] + self._durations[-1] if self._cum else 0.0
        for s in new:
            numbers.append(s.step)
            self._starts.append(s.start)
            self._durations.append(s.duration if s.num_tokens else 0.0)
            self._cum.append(total)
            total += self._durations[-1]
        first = self._cum[0] if self._cum else 0.0
        self._offset = max(0.0, elapsed_busy - (total - first)) - first  # before the window
        self.end = self._offset + total  # at the end of the last step

    def at(self, t: float | None) -> float | None:
        if t is None:
            return None
        i = bisect_right(self._starts, t) - 1
        if i < 0:
            return self._offset + self._cum[0] if self._cum else 0.0
        return self._offset + self._cum[i] + min(max(t - self._starts[i], 0.0), self._durations[i])

    def request(self, r: RequestState) -> RequestState:
        """`r` with its times and its preemption loss on this clock."""
        spans = tuple((self.at(a), self.at(b)) for a, b in r.preempted_spans)
        return replace(
            r,
            arrival=self.at(r.arrival),
            first_scheduled=self.at(r.first_scheduled),
            first_token=self.at(r.first_token),
            finished=self.at(r.finished),
            preempted_spans=spans,
            preemption_time_lost=sum(b - a for a, b in spans),
        )


def newer_than(steps: tuple[StepRecord, ...], number: int) -> list[StepRecord]:
    """The steps after step `number`, oldest first (only those are looked at)."""
    return list(takewhile(lambda s: s.step > number, reversed(steps)))[::-1]


def ttft(r: RequestState) -> float | None:
    return None if r.first_token is None else r.first_token - r.arrival


def tpot(r: RequestState) -> float | None:
    """Mean time per output token after the first (of its first completion)."""
    if r.finished is None or r.first_token is None or r.num_output_tokens < 2:
        return None
    return (r.finished - r.first_token) / (r.num_output_tokens - 1)


class BusyTime:
    """One lane's snapshots on the engine-busy clock (a fresh one per engine)."""

    def __init__(self):
        self._done: dict[str, RequestState] = {}  # the last snapshot's finished, converted
        self._steps: dict[int, StepRecord] = {}  # the last snapshot's steps, converted
        self._key, self._clock, self._step_tuple = None, None, ()  # of the last step window
        self._lost = 0.0  # preemption loss of the requests finished so far
        self._ttfts: deque[float] = deque(maxlen=MAX_LATENCY_SAMPLES)
        self._tpots: deque[float] = deque(maxlen=MAX_LATENCY_SAMPLES)

    def convert(self, snap: EngineSnapshot) -> EngineSnapshot:
        """`snap` with every time on the engine-busy clock; a snapshot without steps (a
        remote server's) as it is."""
        if not snap.steps:
            return snap
        clock, steps = self._window(snap)
        done, requests = {}, []
        for r in snap.requests:
            if r.finished is None:
                requests.append(clock.request(r))
                continue
            if (busy := self._done.get(r.request_id)) is None:
                busy = self._finished(clock.request(r))
            done[r.request_id] = busy
            requests.append(busy)
        self._done = done
        live_lost = sum(r.preemption_time_lost for r in requests if r.finished is None)
        totals = replace(
            snap.totals,
            preemption_time_lost=self._lost + live_lost,
            ttft_p50=percentile(self._ttfts, 50),
            ttft_p95=percentile(self._ttfts, 95),
            tpot_p50=percentile(self._tpots, 50),
            tpot_p95=percentile(self._tpots, 95),
        )
        return replace(
            snap,
            requests=tuple(requests),
            steps=steps,
            totals=totals,
            ttfts=tuple(self._ttfts),
            tpots=tuple(self._tpots),
        )

    def _window(self, snap: EngineSnapshot) -> tuple[BusyClock, tuple[StepRecord, ...]]:
        """The clock of the snapshot's step window and its steps on it; the last ones again
        while no step ran since (the board is published more often than the engine steps).
        A step converted once keeps its conversion: only the new steps are converted."""
        key = (snap.steps[-1].step, len(snap.steps), snap.totals.elapsed_busy)
        if key != self._key:
            if self._clock is None:
                self._clock = BusyClock(snap.steps, snap.totals.elapsed_busy)
            else:
                self._clock.advance(snap.steps, snap.totals.elapsed_busy)
            steps, first = self._steps, snap.steps[0].step
            for number in [n for n in steps if n < first or n > snap.steps[-1].step]:
                del steps[number]
            for s in newer_than(snap.steps, next(reversed(steps)) if steps else -1):
                steps[s.step] = replace(s, start=self._clock.at(s.start))
            self._key, self._step_tuple = key, tuple(steps.values())
        return self._clock, self._step_tuple

    def _finished(self, r: RequestState) -> RequestState:
        """A request seen finished for the first time: its share of the run's numbers."""
        self._lost += r.preemption_time_lost
        if r.stop_reason != "error":
            if (value := ttft(r)) is not None:
                self._ttfts.append(value)
            if (value := tpot(r)) is not None:
                self._tpots.append(value)
        return r
