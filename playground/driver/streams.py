"""Streams: the RequestHandle of each open request, and who hears of outputs and steps.

Used by the driver thread only. A request's last output is held back until the next
BoardState is out, so whoever holds it reads a board (and /metrics) that counts it.
"""

import logging
from collections.abc import Callable

from engine import RequestOutput, StepRecord, StopReason
from playground.handles import RequestHandle, final_output

log = logging.getLogger(__name__)


class Streams:
    def __init__(self):
        self._handles: dict[str, RequestHandle] = {}  # unfinished requests of the first lane
        self._finished: list[tuple[RequestHandle, RequestOutput]] = []  # sent after a publish
        # e.g. /metrics: (fn, whether it hears every output or only the last ones)
        self._listeners: list[tuple[Callable[[RequestOutput], None], bool]] = []
        self._step_listeners: list[Callable[[StepRecord], None]] = []  # e.g. /metrics

    def open(self, handle: RequestHandle) -> None:
        self._handles[handle.request_id] = handle

    def on_finish(self, fn: Callable[[RequestOutput], None], every_output: bool = False) -> None:
        self._listeners.append((fn, every_output))

    def on_step(self, fn: Callable[[StepRecord], None]) -> None:
        self._step_listeners.append(fn)

    def step_done(self, record: StepRecord) -> None:
        """The first lane's record of the step it just ran: to the step listeners."""
        for fn in self._step_listeners:
            _tell(fn, record)

    def deliver(self, out: RequestOutput) -> None:
        """An output of the first lane: to the listeners (that want it), and to its handle."""
        for fn, every_output in self._listeners:
            if every_output or out.finished:
                _tell(fn, out)
        handle = self._handles.get(out.request_id)
        if handle is None:
            return
        if out.finished:
            self._finished.append((handle, out))
            del self._handles[out.request_id]
        else:
            handle.put(out)

    @property
    def has_finished(self) -> bool:
        return bool(self._finished)

    def send_finished(self) -> None:
        """Hand out the held-back last outputs (once the board counts them)."""
        for handle, out in self._finished:
            handle.put(out)
        self._finished.clear()

    def close_all(self, text_of: Callable[[str], str], reason: StopReason) -> None:
        """End every open stream with `reason` and the text it has so far."""
        for rid, handle in list(self._handles.items()):
            handle.put(final_output(rid, text_of(rid), reason))
        self._handles.clear()


def _tell(fn: Callable, what) -> None:
    try:
        fn(what)
    except Exception:  # noqa: BLE001 - a listener must never stop the loop
        log.exception("listener %r failed", fn)
