"""Simulated viewers of the board for bench/bench_viewers.py: asyncio, one connection each.

- `stream`: what a page of the board does now: GET /board/stream (server-sent events, read
  raw: each `board` event is an update; its "at" says how old it is when it arrives), and the
  session's own gr.Timer tick, as often as the server's answer says (nothing follows a tick).
- `poll`: what a page did before the stream (main before it, e47f202): the timer's tick (a
  Gradio POST) as often as the answer says, and, when it says the charts are due, what the
  page's chart_version change runs (the chart redraw, the compare redraw, the lesson). A tick
  that brings a new board version is an update.
"""

import asyncio
import re
import time
from dataclasses import dataclass, field

import httpx

BOARD_EVENT = re.compile(
    rb'event: board\nid: (\d+)\ndata: \{"frame":\d+,"version":(\d+),"at":([\d.]+)'
)  # (frame, board version, time.time() it was built)
TICK_S = 0.25  # the page's timer before its first answer


@dataclass(eq=False)
class Viewer:
    updates: list[float] = field(default_factory=list)  # time.time() of each new version
    ages: list[float] = field(default_factory=list)  # s from the frame's build to its arrival
    versions: list[int] = field(default_factory=list)  # the board version of each update
    num_bytes: int = 0
    num_reconnects: int = 0
    ticked: bool = False  # its session's first tick was answered (Gradio made its session)


@dataclass(frozen=True)
class GradioFns:
    """The page's events as Gradio's /config lists them: (fn_index, trigger_id, num_inputs)."""

    tick: tuple[int, int, int]
    charts: tuple[tuple[int, int, int], ...]  # what chart_version's change runs (poll only)

    @classmethod
    def from_config(cls, config: dict, mode: str) -> "GradioFns":
        timer = next(c["id"] for c in config["components"] if c.get("type") == "timer")
        deps = config["dependencies"]
        tick = next(d for d in deps if [timer, "tick"] in d["targets"])
        fn = (tick["id"], timer, len(tick["inputs"]))
        if mode == "stream":
            return cls(fn, ())
        version = tick["outputs"][1]  # the old TickOutputs.chart_version
        changes = [d for d in deps if [version, "change"] in d["targets"] and d["backend_fn"]]
        return cls(fn, tuple((d["id"], version, len(d["inputs"])) for d in changes))


class Crowd:
    """`n` viewers on `url`, each an asyncio task, until stop()."""

    def __init__(self, url: str, fns: GradioFns, mode: str, n: int):
        self.url, self.fns, self.mode = url, fns, mode
        host, port = url.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)
        self.viewers = [Viewer() for _ in range(n)]
        self.stop_event = asyncio.Event()
        self.http = httpx.AsyncClient(base_url=url, timeout=60,
                                      limits=httpx.Limits(max_connections=64))  # fmt: skip
        self.tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        for i, viewer in enumerate(self.viewers):
            session = f"bench{i}-{time.time_ns()}"
            if self.mode == "stream":
                self.tasks.append(asyncio.create_task(self._stream(viewer)))
            self.tasks.append(asyncio.create_task(self._ticks(viewer, session)))
            await asyncio.sleep(0.002)  # ~500 connections a second

    async def joined(self, timeout_s: float) -> None:
        """Returns once every viewer's session has ticked once and, streamed, its first frame
        came (or after `timeout_s`): the crowd's arrival, which Gradio pays once per session
        (it copies the page's config), is kept out of the rounds."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if all(v.ticked and (self.mode != "stream" or v.updates) for v in self.viewers):
                return
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        self.stop_event.set()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.http.aclose()

    async def _stream(self, viewer: Viewer) -> None:
        """Reads the stream; reconnects when the server ends it (its lifetime, a drop)."""
        last = -1  # the last frame counted (a reconnect starts with the latest one again)
        while not self.stop_event.is_set():
            reader, writer = await asyncio.open_connection(self.host, self.port)
            writer.write(b"GET /board/stream HTTP/1.1\r\nHost: bench\r\n"
                         b"Accept: text/event-stream\r\nConnection: close\r\n\r\n")  # fmt: skip
            tail = b""
            try:
                while chunk := await reader.read(1 << 18):
                    now = time.time()
                    viewer.num_bytes += len(chunk)
                    buf = tail + chunk
                    for m in BOARD_EVENT.finditer(buf):
                        if int(m[1]) > last:  # a frame not counted yet (the tail repeats)
                            last = int(m[1])
                            viewer.updates.append(now)
                            viewer.versions.append(int(m[2]))
                            viewer.ages.append(now - float(m[3]))
                    tail = buf[-200:]
            finally:
                writer.close()
            viewer.num_reconnects += 1

    async def _post(self, session: str, fn: tuple[int, int, int], data: list) -> list:
        body = {"data": data, "fn_index": fn[0], "session_hash": session, "event_data": None,
                "trigger_id": fn[1]}  # fmt: skip
        r = await self.http.post("/gradio_api/run/predict", json=body)
        r.raise_for_status()
        return r.json()["data"]

    async def _ticks(self, viewer: Viewer, session: str) -> None:
        """The session's gr.Timer: its tick, as the page sends it."""
        tick = self._poll_tick if self.mode == "poll" else self._stream_tick
        state = {"seen": -1, "charts_seen": -1, "charts_at": None, "every": TICK_S, "slider": 0}
        while not self.stop_event.is_set():
            await tick(viewer, session, state)
            viewer.ticked = True
            await asyncio.sleep(state["every"])

    async def _stream_tick(self, viewer: Viewer, session: str, st: dict) -> None:
        """[seen, rid, every, role, banner, rewound, slider] -> [version, timer, .., slider, ..]"""
        inputs = [st["seen"], None, st["every"], "", "", None, st["slider"]]
        version, interval, _, _, _, slider, *_ = await self._post(session, self.fns.tick, inputs)
        if isinstance(version, int | float):
            st["seen"] = version
        if isinstance(interval, int | float):
            st["every"] = interval
        if isinstance(slider, dict) and "value" in slider:
            st["slider"] = slider["value"]

    async def _poll_tick(self, viewer: Viewer, session: str, st: dict) -> None:
        """The tick before the stream, [seen, charts_seen, charts_at, rid, every, role, banner,
        rewound] -> [version, chart_version, compare_version, charts_at, timer, ...], then the
        chart_version change's listeners when it moved."""
        inputs = [st["seen"], st["charts_seen"], st["charts_at"], None, st["every"], "", "", None]
        version, charts, _, at, interval, *_ = await self._post(session, self.fns.tick, inputs)
        if isinstance(version, int | float):
            st["seen"] = version
            viewer.updates.append(time.time())
            viewer.versions.append(int(version))
        if isinstance(charts, int | float):
            st["charts_seen"], st["charts_at"] = charts, at
            for fn in self.fns.charts:
                await self._post(session, fn, [charts] + [None] * (fn[2] - 1))
        if isinstance(interval, int | float):
            st["every"] = interval
