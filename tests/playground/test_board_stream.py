"""The board's fan-out: bounded queues, a stalled reader dropped, a reconnect at the latest
frame, nothing left behind by viewers that go, and gzip for whoever accepts it, each frame
compressed once (playground/server/board_stream.py)."""

import asyncio
import zlib
from itertools import count

import pytest

import app
from engine.cpu.openmp import off_thread
from playground.board.frames import Frame
from playground.server import board_stream
from playground.server.board_stream import (
    FRAME_INTERVAL_S,
    HEARTBEAT,
    MAX_TOKEN_CHARS,
    PUBLIC_STREAMS_PER_HOST,
    RETRY,
    STREAM_PATH,
    BoardFeed,
    BoardStreamRoute,
    FanOut,
    seat_token,
)
from playground.server.stream_gzip import deflated


def frame(version: int) -> Frame:
    return Frame(version, version, "", f"delta {version}\n".encode(), f"full {version}\n".encode())


def fan_out(**kwargs) -> FanOut:
    """A fan-out whose clock moves a feed's interval each frame (well inside the budget)."""
    ticks = count(step=FRAME_INTERVAL_S)
    return FanOut(clock=lambda: next(ticks), **kwargs)


def run(coro):
    """The scenario on a thread of its own: the suite's main thread may hold a loop."""
    return off_thread(asyncio.run, asyncio.wait_for(coro, timeout=10))


class Client:
    """One viewer's connection as the route sees it: what it was sent, a disconnect to
    trigger, and a socket that can stall (its send never returns)."""

    def __init__(self, stalled: bool = False, host: str = "10.0.0.1"):
        self.host, self.status, self.encoding = host, None, ""
        self.sent: list[bytes] = []
        self.started = asyncio.Event()
        self.gone = asyncio.Event()
        self.stalled = stalled
        self.completed = False

    async def receive(self):
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message):
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.encoding = dict(message["headers"]).get(b"content-encoding", b"").decode()
            self.started.set()
            return
        if self.stalled and self.sent:
            await asyncio.Event().wait()  # the reader stopped reading: forever
        self.sent.append(message["body"])
        self.completed = not message["more_body"]


def inflate(body: bytes) -> bytes:
    """What a browser reads of a gzip body, as it arrives (no trailer needed)."""
    return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(body)


def route(fanout: FanOut) -> BoardStreamRoute:
    return BoardStreamRoute(BoardFeed(lambda: None, lambda: None, fanout, interval_s=0.01))


async def serve(stream: BoardStreamRoute, client: Client, gzip: bool = False) -> asyncio.Task:
    headers = [(b"accept-encoding", b"gzip, deflate, br, zstd")] if gzip else []
    scope = {"type": "http", "client": (client.host, 50000), "headers": headers}
    task = asyncio.create_task(stream(scope, client.receive, client.send))
    await client.started.wait()
    return task


async def settle():
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_viewer_that_does_not_read_is_dropped_once_its_queue_is_full():
    async def scenario():
        fanout = fan_out(max_buffered=3)
        slow = fanout.subscribe()
        for v in range(3):
            fanout.publish(frame(v))
        assert slow.queue.qsize() == 3 and fanout.num_dropped == 0
        fanout.publish(frame(3))  # one more than it may hold: dropped, not waited for
        assert slow.closed and slow not in fanout.viewers and slow.queue.empty()
        assert fanout.stats()["num_dropped"] == 1

    run(scenario())


def test_a_viewer_that_reconnects_starts_at_the_latest_frame_in_full():
    async def scenario():
        fanout = fan_out()
        first = fanout.subscribe()
        assert first.queue.empty()  # nothing published yet
        for v in range(5):
            fanout.publish(frame(v))
        fanout.close(first)
        again = fanout.subscribe()
        assert again.queue.get_nowait() == b"full 4\n"
        fanout.publish(frame(5))
        assert again.queue.get_nowait() == b"delta 5\n"

    run(scenario())


def test_the_route_sends_the_frames_until_its_viewer_goes():
    """No lifetime: a stream still open long after its first frames gets the next one (a crowd
    that joined together does not come back together), and ends when its client goes."""

    async def scenario():
        fanout = fan_out()
        fanout.publish(frame(0))
        stream = route(fanout)
        client = Client()
        task = await serve(stream, client)
        fanout.publish(frame(1))
        await asyncio.sleep(0.3)
        fanout.heartbeat()
        fanout.publish(frame(2))
        await settle()
        assert not task.done()
        assert client.sent[0].startswith(b"retry: ")
        assert client.sent[1:] == [b"full 0\n", b"delta 1\n", HEARTBEAT, b"delta 2\n"]
        client.gone.set()
        await asyncio.wait_for(task, 2)
        await settle()
        assert fanout.stats() == {**fanout.stats(), "num_viewers": 0, "num_tasks": 0}

    run(scenario())


@pytest.mark.parametrize("stalled", [False, True], ids=["disconnected", "stalled"])
def test_viewers_that_go_or_stall_leave_no_task_and_no_buffer(stalled):
    async def scenario():
        fanout = fan_out(max_buffered=2)
        stream = route(fanout)
        clients = [Client(stalled=stalled and i % 2 == 0) for i in range(10)]
        tasks = [await serve(stream, c) for c in clients]
        assert fanout.stats()["num_viewers"] == 10 and fanout.num_tasks == 20
        for v in range(4):
            fanout.publish(frame(v))
            await settle()
        if not stalled:
            for c in clients[:5]:
                c.gone.set()
        await settle()
        left = 5
        assert fanout.stats()["num_viewers"] == left and fanout.num_tasks == 2 * left
        assert fanout.num_dropped == (5 if stalled else 0)
        assert all(t.done() for t in tasks[:10:2] if stalled)
        for c in clients:
            c.gone.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 2)
        await settle()
        assert fanout.stats()["num_tasks"] == fanout.stats()["num_viewers"] == 0
        assert fanout.stats()["num_buffered_frames"] == 0

    run(scenario())


def test_a_full_queue_of_one_viewer_costs_the_others_nothing():
    async def scenario():
        fanout = fan_out(max_buffered=2)
        stream = route(fanout)
        stalled, fine = Client(stalled=True), Client()
        tasks = [await serve(stream, stalled), await serve(stream, fine)]
        for v in range(6):
            fanout.publish(frame(v))
            await settle()
        assert fine.sent[1:] == [f"delta {v}\n".encode() for v in range(6)]
        assert tasks[0].done() and not tasks[1].done()
        fine.gone.set()
        await asyncio.wait_for(tasks[1], 2)

    run(scenario())


def test_a_fan_out_needs_room_for_a_frame():
    with pytest.raises(ValueError, match="max_buffered"):
        FanOut(max_buffered=0)
    with pytest.raises(ValueError, match="max_per_host"):
        FanOut(max_per_host=0)


def test_one_client_address_holds_at_most_its_cap_of_streams():
    async def scenario():
        fanout = fan_out(max_per_host=2)
        stream = route(fanout)
        mine = [Client(host="10.0.0.7") for _ in range(3)]
        tasks = [await serve(stream, c) for c in mine]
        assert [c.status for c in mine] == [200, 200, 429] and tasks[2].done()
        assert b"at most 2" in mine[2].sent[0] and fanout.stats()["num_refused"] == 1
        other = Client(host="10.0.0.8")  # another address is not counted with them
        tasks.append(await serve(stream, other))
        assert other.status == 200 and fanout.stats()["num_viewers"] == 3
        mine[0].gone.set()  # one goes: its address may open one more
        await asyncio.wait_for(tasks[0], 2)
        again = Client(host="10.0.0.7")
        tasks.append(await serve(stream, again))
        assert again.status == 200 and fanout.per_host == {"10.0.0.7": 2, "10.0.0.8": 1}
        for c in (mine[1], other, again):
            c.gone.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 2)
        assert not fanout.per_host and fanout.stats()["num_tasks"] == 0

    run(scenario())


def test_the_cap_is_a_public_servers_only(driver, monkeypatch):
    """Locally (loopback tests with many viewers from one address) no cap; a public server
    (--public, a Space) caps each address at PUBLIC_STREAMS_PER_HOST."""
    monkeypatch.delenv("SPACE_ID", raising=False)
    for public, cap in ((False, None), (True, PUBLIC_STREAMS_PER_HOST)):
        served = app.create_app(driver, frontend=app.Frontend(public=public))
        (stream,) = [r for r in served.routes if getattr(r, "path", "") == STREAM_PATH]
        assert stream.app.fanout.max_per_host == cap


def test_the_feed_builds_a_frame_per_new_version_or_banner_and_only_while_anyone_watches(driver):
    """A still board sends no frame; a stuck step's banner is a new frame without a new
    version; the feed's task ends with the last viewer."""

    async def scenario():
        fanout, stuck = fan_out(), [None]
        feed = BoardFeed(driver.state, lambda: stuck[0], fanout, interval_s=0.01)
        viewer = fanout.subscribe()
        feed.start()
        await asyncio.sleep(0.1)
        assert fanout.num_frames == 1  # the board as it is, once
        stuck[0] = 12.0
        await asyncio.sleep(0.1)
        assert fanout.num_frames == 2 and fanout.latest.version == driver.state().version
        assert "looks stuck" in fanout.latest.alert and b"looks stuck" in fanout.latest.delta
        fanout.close(viewer)
        await asyncio.wait_for(feed._task, 1)

    run(scenario())


def test_a_stream_names_its_seat_token_in_its_query():
    assert seat_token({"query_string": b"seat=abc"}) == "abc"
    assert seat_token({"query_string": b""}) == seat_token({}) == ""
    assert len(seat_token({"query_string": b"seat=" + b"x" * 1000})) == MAX_TOKEN_CHARS


def test_the_route_sends_gzip_to_whoever_accepts_it_compressing_each_frame_once(monkeypatch):
    compressed = []

    def counted(data: bytes) -> bytes:
        compressed.append(data)
        return deflated(data)

    monkeypatch.setattr(board_stream, "deflated", counted)

    async def scenario():
        fanout = fan_out()
        fanout.publish(frame(0))
        stream = route(fanout)
        browsers = [Client() for _ in range(20)]
        plain = Client()
        tasks = [await serve(stream, c, gzip=True) for c in browsers]
        tasks.append(await serve(stream, plain, gzip=False))
        for v in (1, 2):
            fanout.publish(frame(v))
        fanout.heartbeat()
        await settle()
        want = RETRY + b"full 0\n" + b"delta 1\n" + b"delta 2\n" + HEARTBEAT
        for c in browsers:
            assert c.encoding == "gzip" and inflate(b"".join(c.sent)) == want
        assert plain.encoding == "" and b"".join(plain.sent) == want
        # frame 0 in full, then each delta: once for all 20 browsers (the retry line and the
        # heartbeat are compressed once, at import)
        assert compressed.count(b"full 0\n") == 1 and compressed.count(b"delta 1\n") == 1
        assert len([d for d in compressed if d != RETRY]) == 3
        for c in [*browsers, plain]:
            c.gone.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 2)

    run(scenario())
