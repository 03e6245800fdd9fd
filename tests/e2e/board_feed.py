"""The board's stream as one more viewer reads it: a thread subscribed to GET /board/stream
(playground/server/board_stream.py) from before the runs start, that keeps every step-log line
the frames carried. A frame holds only the last 60 lines, so the lines are merged by step, per
lesson run: the run a frame shows is the first of its "lessons" (the running preset's key and
run, playground/board/frames.py). An idle board's frame has no step line, so the frames of the
board between two runs add nothing."""

import contextlib
import html
import re
import threading
import time
from socket import SHUT_RDWR

import httpx
import orjson

ITEM = re.compile(r"<li>(.*?)</li>")  # a step's line (the empty log's is <li class=...>)
STEP = re.compile(r"step (\d+) ")
READ_TIMEOUT_S = 30.0  # a still board sends a heartbeat every 5 s


class BoardFeed:
    def __init__(self, url: str):
        self.url = url + "/board/stream"
        self.error: BaseException | None = None  # what stopped the reader, if anything did
        self._lines: dict[tuple[str, int], dict[int, str]] = {}  # (lesson, run) -> step -> line
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._response: httpx.Response | None = None  # the stream being read
        self._thread = threading.Thread(target=self._read, daemon=True)

    def start(self) -> "BoardFeed":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Closes the stream now (the server it reads from stops with one viewer fewer)."""
        self._stop.set()
        response = self._response
        sock = response and response.extensions["network_stream"].get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # else: that stream had ended already
                sock.shutdown(SHUT_RDWR)  # the read waiting for the next frame ends now
        self._thread.join(timeout=5.0)

    def lines(self, key: str, run: int) -> dict[int, str]:
        assert self.error is None, f"the board's stream reader stopped: {self.error!r}"
        with self._lock:
            return dict(self._lines.get((key, run), {}))

    def newest_step(self, key: str, run: int) -> int:
        return max(self.lines(key, run), default=0)

    def _read(self) -> None:
        """Reads the stream until stopped (again, if the server drops it)."""
        try:
            while not self._stop.is_set():
                try:
                    timeout = httpx.Timeout(10.0, read=READ_TIMEOUT_S)
                    with httpx.stream("GET", self.url, timeout=timeout) as self._response:
                        self._take(self._response.iter_lines())
                except httpx.TransportError:  # the server restarts a stream or stops
                    time.sleep(0.1)
        except Exception as exc:  # noqa: BLE001 - kept for the test to report
            if not self._stop.is_set():  # else: the stream stop() closed under the read
                self.error = exc

    def _take(self, lines) -> None:
        """Server-sent events: an `event:` line, then its `data:` line; a blank line ends it."""
        event = None
        for line in lines:
            if self._stop.is_set():
                return
            if line.startswith("event: "):
                event = line.removeprefix("event: ")
            elif line.startswith("data: ") and event == "board":
                self._frame(orjson.loads(line.removeprefix("data: ")))
            elif not line:
                event = None

    def _frame(self, board: dict) -> None:
        items = [html.unescape(item) for item in ITEM.findall(board["log"])]
        steps = {int(m[1]): item for item in items if (m := STEP.match(item))}
        if not steps or not board["lessons"]:
            return
        run = (board["lessons"][0]["key"], board["lessons"][0]["run"])
        with self._lock:
            kept = self._lines.setdefault(run, {})
            for step, line in steps.items():
                kept.setdefault(step, line)
