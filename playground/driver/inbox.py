"""Inbox: the commands other threads send the driver thread, each with its Future."""

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

log = logging.getLogger(__name__)


class Inbox:
    def __init__(self):
        self.wake = threading.Event()  # set by every command: the loop stops waiting
        self.thread: threading.Thread | None = None  # the driver thread: its calls run at once
        self._queue: queue.Queue[tuple[Callable, Future]] = queue.Queue()

    def call(self, fn: Callable, wait: bool, timeout: float = 30.0):
        """Run `fn()` on the driver thread. wait=True returns its result (or raises its
        exception), and raises concurrent.futures.TimeoutError past `timeout`: fn then never
        runs. wait=False returns None at once."""
        if threading.current_thread() is self.thread:
            return fn()
        fut = self.post(fn)
        return self.result(fut, timeout) if wait else None

    def post(self, fn: Callable) -> Future:
        """Queue `fn()` for the driver thread (on that thread: run it now); its Future, for a
        caller that waits its own way (an event loop: `asyncio.wrap_future`)."""
        fut: Future = Future()
        if threading.current_thread() is self.thread:
            _run(fn, fut)
            return fut
        self._queue.put((fn, fut))
        self.wake.set()
        return fut

    @staticmethod
    def result(fut: Future, timeout: float):
        """`fut`'s result; past `timeout` it is cancelled (a queued command then never runs)
        and concurrent.futures.TimeoutError raised."""
        try:
            return fut.result(timeout)
        except FutureTimeout:
            fut.cancel()  # still queued: it will not run (a running one finishes)
            raise

    def drain(self) -> bool:
        """Run every queued command, in order (driver thread); True if any ran."""
        ran = False
        while True:
            try:
                fn, fut = self._queue.get_nowait()
            except queue.Empty:
                return ran
            if not fut.set_running_or_notify_cancel():
                continue  # its caller timed out and gave up
            ran = True
            _run(fn, fut)


def _run(fn: Callable, fut: Future) -> None:
    try:
        fut.set_result(fn())
    except BaseException as exc:  # noqa: BLE001 - handed to whoever waits
        if not isinstance(exc, ValueError):
            log.exception("driver command failed")
        fut.set_exception(exc)
