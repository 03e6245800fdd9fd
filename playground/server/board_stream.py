"""The live board for a crowd: one stream of prepared frames per viewer (server-sent events).

GET /board/stream: the page's assets/board_stream.js subscribes. A feed task (one, while anyone
watches) looks at the driver's BoardState every FRAME_INTERVAL_S and builds one Frame of each
new version or banner, and one more when a version's charts were not due yet
(playground/board/frames.py); the FanOut puts its bytes in every viewer's bounded
queue, and each viewer's writer sends them. Per viewer and frame that is a queue put and a
socket write: nothing is computed per viewer, and nothing a viewer does changes the frame.

- A viewer that (re)connects gets the latest frame in full first (every chart), then deltas.
- A viewer whose request accepts gzip (every browser's) gets the stream in gzip, each frame
  compressed once for all of them (playground/server/stream_gzip.py): about a sixth of the
  bytes to write, send and read.
- A viewer whose queue is full (a slow or stalled reader) is dropped: its queue is emptied and
  its connection closed; its browser reconnects (EventSource) and resumes at the latest frame.
- A stream lasts as long as its viewer stays (no periodic reconnect: each one would cost the
  server a request and a full frame, and a crowd that joined together would come back
  together); a server shutting down closes them (app.py's graceful-shutdown timeout).
- What a reader that stops reading holds below its queue (the socket's buffers) is bounded by
  the server's listening socket (playground/server/frontend.py's bound_connections): the
  writes to it block within a few frames, so its queue fills and it is dropped; its
  connection, which the server closes only once its data is sent, is reset by the kernel
  after STALLED_AFTER_S.
- A public server (a Space, --public) takes at most PUBLIC_STREAMS_PER_HOST streams from one
  client address (429 past it), so one client cannot grow everyone's fan-out; a class behind
  one school address still fits. Locally there is no cap, as the API's per-client limits.
- The crowd's writes are rationed (playground/server/crowd_budget.py): past
  VIEWER_UPDATES_PER_S in all, each viewer gets a frame every len(viewers) / budget seconds,
  in full when it missed some. A stream whose `seat` query is a seat holder's token
  (playground/access/seat_pass.py) gets every frame.
- GET /board/stream/stats: the fan-out's counters (viewers, writer and watcher tasks alive,
  frames buffered in all and in the fullest queue, drops, streams refused, one viewer's update
  interval now, the streams served at the seat's full rate), so a test can see that nothing
  is left behind.
"""

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from playground.board.frames import Frame, FrameBuilder, board_alert
from playground.board.state import BoardState
from playground.server.crowd_budget import CrowdBudget
from playground.server.stream_gzip import GZIP_HEADER, accepts_gzip, deflated

log = logging.getLogger(__name__)

STREAM_PATH = "/board/stream"
FRAME_INTERVAL_S = 0.25  # the feed looks for a new BoardState 4 times a second
MAX_BUFFERED_FRAMES = 8  # frames a viewer may lag behind before it is dropped (2 s)
HEARTBEAT_S = 5.0  # a comment line while the board is still: a gone reader's write fails
RETRY_MS = 500  # EventSource's wait before it reconnects
PUBLIC_STREAMS_PER_HOST = 300  # a public server's cap per client address: a whole class
REFUSED_RETRY_S = 30  # the Retry-After of a stream refused past the cap
MAX_TOKEN_CHARS = 64  # a seat token is shorter; a longer query is cut, not stored
HEARTBEAT = b": still\n\n"
HEARTBEAT_GZIP = deflated(HEARTBEAT)
RETRY = f"retry: {RETRY_MS}\n\n".encode()
HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # a proxy must pass each event on at once
    (b"vary", b"accept-encoding"),
]
GZIP_HEADERS = [*HEADERS, (b"content-encoding", b"gzip")]


@dataclass(eq=False)
class Viewer:
    """One stream: its bounded queue of frame bytes and the task that writes them."""

    queue: asyncio.Queue
    task: asyncio.Task | None
    host: str = ""  # the client's address
    token: str = ""  # the seat token its page sent ("" none)
    gzip: bool = False  # its stream is gzip (its request accepted it)
    sent: int = 0  # the fan-out's num_frames at its last frame: it missed none if one behind
    closed: bool = False


@dataclass
class FanOut:
    """Every viewer's queue; runs on the server's event loop only (no locks)."""

    max_buffered: int = MAX_BUFFERED_FRAMES
    max_per_host: int | None = None  # streams one client address may hold; None: no cap
    viewers: set[Viewer] = field(default_factory=set)
    per_host: Counter = field(default_factory=Counter)  # client address -> its viewers
    latest: Frame | None = None
    num_tasks: int = 0  # writer and watcher tasks alive (kept by BoardStreamRoute)
    num_frames: int = 0
    num_dropped: int = 0
    num_refused: int = 0  # streams refused past max_per_host
    budget: CrowdBudget = field(default_factory=CrowdBudget)
    clock: Callable[[], float] = time.monotonic
    seat_tokens: Callable[[], tuple[str, ...]] = tuple  # the full-rate streams' (SeatPass)
    by_token: dict[str, set[Viewer]] = field(default_factory=dict)  # viewers with a token
    gzipped: dict[bool, bytes] = field(default_factory=dict)  # the latest frame's, by `full`

    def __post_init__(self):
        if self.max_buffered < 1:
            raise ValueError(f"max_buffered must be >= 1, got {self.max_buffered}")
        if self.max_per_host is not None and self.max_per_host < 1:
            raise ValueError(f"max_per_host must be >= 1 or None, got {self.max_per_host}")

    def can_subscribe(self, host: str) -> bool:
        return self.max_per_host is None or self.per_host[host] < self.max_per_host

    def subscribe(self, host: str = "", token: str = "", gzip: bool = False) -> Viewer:
        """A new viewer from client address `host` (its page's seat `token`; a `gzip`
        stream), written by the current task; the latest frame (in full) comes first."""
        viewer = Viewer(asyncio.Queue(self.max_buffered), asyncio.current_task(), host, token,
                        gzip)  # fmt: skip
        viewer.sent = self.num_frames
        if self.latest is not None:
            viewer.queue.put_nowait(self._bytes(viewer, full=True))
        self.viewers.add(viewer)
        self.per_host[host] += 1
        self.budget.add(viewer)
        if token:
            self.by_token.setdefault(token, set()).add(viewer)
        return viewer

    def publish(self, frame: Frame) -> None:
        """The frame to the viewers the budget says are due and to the seat's streams: its
        delta to one that got the frame before, else in full."""
        self.latest, self.gzipped = frame, {}
        self.num_frames += 1
        targets = dict.fromkeys(self.budget.due(self.clock()))
        for token in self.seat_tokens() if self.by_token else ():
            targets.update(dict.fromkeys(self.by_token.get(token, ())))
        for viewer in targets:
            missed = viewer.sent != self.num_frames - 1
            viewer.sent = self.num_frames
            self._put(viewer, self._bytes(viewer, full=missed))

    def heartbeat(self) -> None:
        for viewer in list(self.viewers):
            self._put(viewer, HEARTBEAT_GZIP if viewer.gzip else HEARTBEAT)

    def _bytes(self, viewer: Viewer, full: bool) -> bytes:
        """The latest frame for `viewer`: in `full` or its delta, plain or gzip (compressed
        once for every viewer that takes it)."""
        data = self.latest.full if full else self.latest.delta
        if not viewer.gzip:
            return data
        if full not in self.gzipped:
            self.gzipped[full] = deflated(data)
        return self.gzipped[full]

    def _put(self, viewer: Viewer, data: bytes) -> None:
        if viewer.closed:
            return
        try:
            viewer.queue.put_nowait(data)
        except asyncio.QueueFull:  # it reads slower than frames come: not waited for
            self.num_dropped += 1
            self.close(viewer)

    def close(self, viewer: Viewer) -> None:
        """The viewer is gone (or dropped): its queue is emptied, its writer stopped."""
        if viewer.closed:
            return
        viewer.closed = True
        self.viewers.discard(viewer)
        self.budget.remove(viewer)
        if viewer.token:
            self.by_token[viewer.token].discard(viewer)
            if not self.by_token[viewer.token]:
                del self.by_token[viewer.token]
        self.per_host[viewer.host] -= 1
        if not self.per_host[viewer.host]:
            del self.per_host[viewer.host]
        while not viewer.queue.empty():
            viewer.queue.get_nowait()
        if viewer.task is not None and viewer.task is not asyncio.current_task():
            viewer.task.cancel()

    def stats(self) -> dict:
        sizes = [v.queue.qsize() for v in self.viewers]
        return {
            "num_viewers": len(self.viewers),
            "num_tasks": self.num_tasks,
            "num_buffered_frames": sum(sizes),
            "max_buffered_frames": max(sizes, default=0),  # the fullest queue (a slow reader's)
            "num_frames": self.num_frames,
            "num_dropped": self.num_dropped,
            "num_refused": self.num_refused,
            "update_interval_s": round(self.budget.interval_s(), 3),  # one viewer's, now
            "num_seat_viewers": sum(len(self.by_token.get(t, ())) for t in self.seat_tokens()),
        }


class BoardFeed:
    """Builds a frame of each new BoardState (or banner) while anyone watches (one task at
    most). `state`: the driver's latest BoardState; `stuck_for`: the watchdog's seconds."""

    def __init__(self, state: Callable[[], BoardState], stuck_for: Callable[[], float | None],
                 fanout: FanOut, interval_s: float = FRAME_INTERVAL_S):  # fmt: skip
        self.state, self.stuck_for, self.fanout = state, stuck_for, fanout
        self.interval_s = interval_s
        self.builder = FrameBuilder()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        loop, last = asyncio.get_running_loop(), None
        sent = loop.time()
        while self.fanout.viewers:
            now = loop.time()
            state = self.state()
            if state is not None and self._due(state, last, now):
                try:
                    last = self.builder.build(state, board_alert(state, self.stuck_for()), now)
                    self.fanout.publish(last)
                except Exception:  # noqa: BLE001 - a bad frame must not end the feed
                    log.exception("building the board's frame %s failed", state.version)
                sent = now
            elif now - sent >= HEARTBEAT_S:
                self.fanout.heartbeat()
                sent = now
            await asyncio.sleep(self.interval_s)

    def _due(self, state: BoardState, last: Frame | None, now: float) -> bool:
        """A new version or banner since the `last` frame, or its version's charts now due."""
        if last is None or state.version != last.version or self.builder.charts_due(state, now):
            return True
        return board_alert(state, self.stuck_for()) != last.alert


def seat_token(scope) -> str:
    """The stream's `seat` query: the token the seat holder's page was given ("" none)."""
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("seat", [""])
    return values[0][:MAX_TOKEN_CHARS]


class BoardStreamRoute:
    """The ASGI app of GET /board/stream: one viewer per request."""

    def __init__(self, feed: BoardFeed):
        self.feed, self.fanout = feed, feed.fanout

    async def __call__(self, scope, receive, send) -> None:
        host = (scope.get("client") or ("",))[0]
        if not self.fanout.can_subscribe(host):
            self.fanout.num_refused += 1
            await self._refuse(send)
            return
        self.feed.start()
        gzip = accepts_gzip(scope)
        viewer = self.fanout.subscribe(host, seat_token(scope), gzip)
        watcher = asyncio.get_running_loop().create_task(self._watch(receive, viewer))
        self.fanout.num_tasks += 1
        try:
            await send({"type": "http.response.start", "status": 200,
                        "headers": GZIP_HEADERS if gzip else HEADERS})  # fmt: skip
            await self._write(viewer, send)
        except asyncio.CancelledError:
            if not viewer.closed:  # not ours (the server is stopping)
                raise
            asyncio.current_task().uncancel()  # gone or dropped: the connection closes
        finally:
            self.fanout.close(viewer)
            watcher.cancel()
            self.fanout.num_tasks -= 1

    async def _refuse(self, send) -> None:
        """429: this client address holds as many streams as it may."""
        body = (f"at most {self.fanout.max_per_host} board streams from one address; retry "
                "later").encode()  # fmt: skip
        headers = [(b"content-type", b"text/plain; charset=utf-8"),
                   (b"retry-after", str(REFUSED_RETRY_S).encode())]  # fmt: skip
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _write(self, viewer: Viewer, send) -> None:
        """Sends the viewer's frames until it is closed (gone or dropped)."""
        first = GZIP_HEADER + deflated(RETRY) if viewer.gzip else RETRY
        await send({"type": "http.response.body", "body": first, "more_body": True})
        while not viewer.closed:
            data = await viewer.queue.get()
            await send({"type": "http.response.body", "body": data, "more_body": True})

    async def _watch(self, receive, viewer: Viewer) -> None:
        """Closes the viewer when its client disconnects (a write to it would not say so)."""
        self.fanout.num_tasks += 1
        try:
            while (await receive())["type"] != "http.disconnect":
                pass
            self.fanout.close(viewer)
        finally:
            self.fanout.num_tasks -= 1


def register_board_stream(
    app: FastAPI,
    state: Callable[[], BoardState],
    stuck_for: Callable[[], float | None],
    public: bool = False,
    seat_tokens: Callable[[], tuple[str, ...]] = tuple,
) -> FanOut:
    """GET /board/stream and /board/stream/stats on `app` (before Gradio's mount at "/");
    `state`, `stuck_for`: the driver's (EngineDriver.state, .stuck_for); `public`: a public
    server's (PUBLIC_STREAMS_PER_HOST per client address); `seat_tokens`: the full-rate
    streams' tokens (SeatPass.tokens). Returns the fan-out."""
    fanout = FanOut(max_per_host=PUBLIC_STREAMS_PER_HOST if public else None,
                    seat_tokens=seat_tokens)  # fmt: skip
    feed = BoardFeed(state, stuck_for, fanout)
    app.add_route(STREAM_PATH, BoardStreamRoute(feed), methods=["GET"])

    @app.get(STREAM_PATH + "/stats", include_in_schema=False)
    async def stream_stats() -> JSONResponse:  # on the loop the fan-out lives on
        return JSONResponse(fanout.stats())

    return fanout
