"""Simulated viewers of the board for bench/bench_viewers.py: asyncio, one connection each.

- `stream`: what a page of the board does now: GET /board/stream (server-sent events in gzip,
  as a browser asks for them; parsed by h11 and inflated: each `board` event is an
  update; its "published" says when the engine's driver published the BoardState it shows, its
  "at" when the frame was built), and the session's own gr.Timer tick, as often as the
  server's answer says (nothing follows a tick).
- `poll`: what a page did before the stream (main before it, e47f202): the timer's tick (a
  Gradio POST) as often as the answer says, and, when it says the charts are due, what the
  page's chart_version change runs (the chart redraw, the compare redraw, the lesson). A tick
  that brings a new board version is an update.

Every session's first tick is its page's load event (`arrive`: it becomes a visitor of the
board). The crowd's `seat`, when asked for, is one more session that then takes the control
seat (the seat button, as a page's click sends it; the server runs with --controls seat), so
the server ticks it at the full rate (playground/ui/live.py's wants_full_rate): its own
connections, its ticks' round trips timed.
"""

import asyncio
import re
import time
import zlib
from dataclasses import dataclass, field

import h11
import httpx

BOARD_EVENT = re.compile(
    rb'event: board\nid: (\d+)\ndata: \{"frame":\d+,"version":(\d+),"at":([\d.]+)'
    rb'(?:,"published":([\d.]+))?'
)  # (frame, board version, time.time() it was built, and its BoardState was published)
TICK_S = 0.25  # the page's timer before its first answer
STREAM_HEADERS = [("Host", "bench"), ("Accept", "text/event-stream"), ("Accept-Encoding", "gzip"),
                  ("Connection", "close")]  # fmt: skip


@dataclass(eq=False)
class Viewer:
    updates: list[float] = field(default_factory=list)  # time.time() of each new version
    ages: list[float] = field(default_factory=list)  # s from the frame's build to its arrival
    # s from the engine's publishing of the frame's BoardState to its arrival (a server whose
    # frames carry no "published": none)
    published_ages: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # the board version of each update
    num_bytes: int = 0
    num_reconnects: int = 0
    ticked: bool = False  # its session's first tick was answered (Gradio made its session)
    round_trips: list[tuple[float, float]] = field(default_factory=list)  # (answered, s) a tick


@dataclass(frozen=True)
class GradioFns:
    """The page's events as Gradio's /config lists them: (fn_index, trigger_id, num_inputs)."""

    tick: tuple[int, int, int]
    arrive: tuple[int, int, int]  # the page's load event: the tick's inputs and outputs
    toggle_seat: tuple[int, int, int]  # the seat button's click
    leave: tuple[int, int, int]  # the page's unload event
    charts: tuple[tuple[int, int, int], ...]  # what chart_version's change runs (poll only)

    @classmethod
    def from_config(cls, config: dict, mode: str) -> "GradioFns":
        timer = next(c["id"] for c in config["components"] if c.get("type") == "timer")
        deps = config["dependencies"]
        tick = next(d for d in deps if [timer, "tick"] in d["targets"])
        named = {d.get("api_name"): d for d in deps}
        page = [
            (named[name]["id"], named[name]["targets"][0][0], len(named[name]["inputs"]))
            for name in ("arrive", "toggle_seat", "leave")
        ]
        fn = (tick["id"], timer, len(tick["inputs"]))
        if mode == "stream":
            return cls(fn, *page, ())
        version = tick["outputs"][1]  # the old TickOutputs.chart_version
        changes = [d for d in deps if [version, "change"] in d["targets"] and d["backend_fn"]]
        return cls(fn, *page, tuple((d["id"], version, len(d["inputs"])) for d in changes))


class Crowd:
    """`n` viewers on `url`, each an asyncio task, until stop(); `seat`: one more session that
    takes the control seat, on connections of its own (a page's own browser)."""

    def __init__(self, url: str, fns: GradioFns, mode: str, n: int, seat: bool = False):
        self.url, self.fns, self.mode = url, fns, mode
        host, port = url.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)
        self.viewers = [Viewer() for _ in range(n)]
        self.seat = Viewer() if seat else None
        self.stop_event = asyncio.Event()
        self.http = httpx.AsyncClient(base_url=url, timeout=60,
                                      limits=httpx.Limits(max_connections=64))  # fmt: skip
        self.seat_http = httpx.AsyncClient(base_url=url, timeout=60)
        self.sessions: list[tuple[str, httpx.AsyncClient]] = []  # every session, to leave
        self.tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        """The seat first (taken before the crowd comes), then the crowd."""
        if self.seat is not None:
            await self._join(self.seat, f"seat-{time.time_ns()}", self.seat_http, seat=True)
        for i, viewer in enumerate(self.viewers):
            await self._join(viewer, f"bench{i}-{time.time_ns()}", self.http)
            await asyncio.sleep(0.002)  # ~500 connections a second

    async def joined(self, timeout_s: float) -> int:
        """Returns once every viewer's session has ticked once and, streamed, its first frame
        came (or after `timeout_s`): the crowd's arrival, which Gradio pays once per session
        (it copies the page's config), is kept out of the rounds. The viewers not joined."""
        end = time.monotonic() + timeout_s
        while True:
            waiting = sum(
                not (v.ticked and (self.mode != "stream" or v.updates)) for v in self.viewers
            )
            if not waiting or time.monotonic() >= end:
                return waiting
            await asyncio.sleep(0.05)

    async def stop(self) -> list[BaseException]:
        """Every task ends, and every session leaves (its page's unload event). Returns what
        failed on the way: a viewer's stream or tick that raised, a leave refused."""
        self.stop_event.set()
        for task in self.tasks:
            task.cancel()
        ended = await asyncio.gather(*self.tasks, return_exceptions=True)
        left = await asyncio.gather(*(self._leave(s, http) for s, http in self.sessions),
                                    return_exceptions=True)  # fmt: skip
        await self.http.aclose()
        await self.seat_http.aclose()
        return [
            e
            for e in [*ended, *left]
            if isinstance(e, BaseException) and not isinstance(e, asyncio.CancelledError)
        ]

    async def _leave(self, session: str, http) -> None:
        """The page's unload event: a session that stayed, the seat's above all, would still
        hold the seat in the next round."""
        leave = self.fns.leave
        await self._post(session, leave, [None] * leave[2], http, again=True)

    async def _join(self, viewer: Viewer, session: str, http, seat: bool = False) -> None:
        """A page opens: its load event (the first tick); the seat's then takes the seat."""
        st = {"seen": -1, "charts_seen": -1, "charts_at": None, "every": TICK_S, "slider": 0,
              "role": "", "banner": "", "http": http, "fn": self.fns.arrive}  # fmt: skip
        self.sessions.append((session, http))
        if seat:
            await self._tick(viewer, session, st)
            toggle = self.fns.toggle_seat
            answer = await self._post(session, toggle, [st["role"], st["banner"]][: toggle[2]],
                                      http)  # fmt: skip
            if answer:  # the banner and role (a page from before the stream: no answer)
                self._show_seat(st, *answer)
                if not st["role"].startswith("driver"):
                    raise RuntimeError(f"the seat was not taken: {st['role']}")
            await self._tick(viewer, session, st)  # the holder's tick: its stream's pass
        if self.mode == "stream":
            self.tasks.append(asyncio.create_task(self._stream(viewer, st)))
        self.tasks.append(asyncio.create_task(self._ticks(viewer, session, st)))

    async def _stream(self, viewer: Viewer, st: dict) -> None:
        """Reads the stream (HTTP parsed by h11); reconnects when the server ends it (a drop),
        with the seat's pass its last tick brought (the seat's holder: every frame)."""
        last = -1  # the last frame counted (a reconnect starts with the latest one again)
        while not self.stop_event.is_set():
            reader, writer = await asyncio.open_connection(self.host, self.port)
            query = f"?seat={st['pass']}" if st.get("pass") else ""
            http = h11.Connection(h11.CLIENT)
            writer.write(http.send(h11.Request(method="GET", target=f"/board/stream{query}",
                                               headers=STREAM_HEADERS))
                         + http.send(h11.EndOfMessage()))  # fmt: skip
            tail, inflate = b"", None
            try:
                while chunk := await reader.read(1 << 18):
                    now = time.time()
                    viewer.num_bytes += len(chunk)
                    http.receive_data(chunk)
                    body = []
                    while (event := http.next_event()) not in (h11.NEED_DATA, h11.PAUSED):
                        if isinstance(event, h11.Response):  # a gzip body, as a browser's?
                            gzip = (b"content-encoding", b"gzip") in event.headers
                            inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzip else None
                        elif isinstance(event, h11.Data):
                            body.append(inflate.decompress(event.data) if inflate else event.data)
                    buf = tail + b"".join(body)
                    for m in BOARD_EVENT.finditer(buf):
                        if int(m[1]) > last:  # a frame not counted yet (the tail repeats)
                            last = int(m[1])
                            viewer.updates.append(now)
                            viewer.versions.append(int(m[2]))
                            viewer.ages.append(now - float(m[3]))
                            if m[4] is not None:
                                viewer.published_ages.append(now - float(m[4]))
                    tail = buf[-200:]
            finally:
                writer.close()
            viewer.num_reconnects += 1

    async def _post(self, session: str, fn: tuple[int, int, int], data: list, http,
                    again: bool = False) -> list:  # fmt: skip
        """One event; `again`: sent once more if its pooled connection was closed under it
        (the server's keep-alive timeout, a tick cancelled mid-request), for the events that
        may run twice (a tick, a leave; not the seat button's toggle)."""
        body = {"data": data, "fn_index": fn[0], "session_hash": session, "event_data": None,
                "trigger_id": fn[1]}  # fmt: skip
        try:
            r = await http.post("/gradio_api/run/predict", json=body)
        except httpx.TransportError:
            if not again:
                raise
            r = await http.post("/gradio_api/run/predict", json=body)
        r.raise_for_status()
        return r.json()["data"]

    async def _ticks(self, viewer: Viewer, session: str, st: dict) -> None:
        """The session's gr.Timer: its tick, as the page sends it."""
        while not self.stop_event.is_set():
            await self._tick(viewer, session, st)
            await asyncio.sleep(st["every"])

    async def _tick(self, viewer: Viewer, session: str, st: dict) -> None:
        """One tick (the first through the load event), its round trip timed; the charts'
        listeners after it (poll) are not part of it."""
        inputs = (
            [st["seen"], st["charts_seen"], st["charts_at"], None, st["every"], st["role"],
             st["banner"], None]
            if self.mode == "poll"
            else [st["seen"], None, st["every"], st["role"], st["banner"], None, st["slider"]]
        )  # fmt: skip
        t0 = time.monotonic()
        answer = await self._post(session, st["fn"], inputs, st["http"], again=True)
        viewer.round_trips.append((time.time(), time.monotonic() - t0))
        st["fn"], viewer.ticked = self.fns.tick, True
        self._show_seat(st, *answer[-2:])
        if self.mode == "poll":
            await self._poll_answer(viewer, session, st, answer)
        else:
            self._stream_answer(st, answer)

    @staticmethod
    def _show_seat(st: dict, banner, role) -> None:
        """The page shows the seat banner and role key of an answer, where they changed."""
        st["banner"] = banner if isinstance(banner, str) else st["banner"]
        st["role"] = role if isinstance(role, str) else st["role"]

    @staticmethod
    def _stream_answer(st: dict, answer: list) -> None:
        """[version, timer, board, inspector, own charts, stream pass, slider, seat, role]"""
        version, interval, _, _, _, stream_pass, slider, *_ = answer
        if isinstance(stream_pass, str):
            st["pass"] = stream_pass
        if isinstance(version, int | float):
            st["seen"] = version
        if isinstance(interval, int | float):
            st["every"] = interval
        if isinstance(slider, dict) and "value" in slider:
            st["slider"] = slider["value"]

    async def _poll_answer(self, viewer: Viewer, session: str, st: dict, answer: list) -> None:
        """The tick before the stream answered [version, chart_version, compare_version,
        charts_at, timer, ..., seat, role]; then the chart_version change's listeners run when
        it moved."""
        version, charts, _, at, interval, *_ = answer
        if isinstance(version, int | float):
            st["seen"] = version
            viewer.updates.append(time.time())
            viewer.versions.append(int(version))
        if isinstance(charts, int | float):
            st["charts_seen"], st["charts_at"] = charts, at
            for fn in self.fns.charts:
                await self._post(session, fn, [charts] + [None] * (fn[2] - 1), st["http"])
        if isinstance(interval, int | float):
            st["every"] = interval
