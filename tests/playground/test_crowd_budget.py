"""The crowd budget: below it every viewer gets every frame; above it the writes per second stay
within it, every viewer still gets its turn, a viewer that missed frames gets one in full, and
the seat's stream gets every frame (playground/server/crowd_budget.py, board_stream.py)."""

import asyncio
from itertools import pairwise

import pytest

from engine.cpu.openmp import off_thread
from playground.board.frames import Frame
from playground.server.board_stream import FanOut
from playground.server.crowd_budget import VIEWER_UPDATES_PER_S, CrowdBudget

FRAME_S = 0.3  # the feed's usual gap between frames
BUDGET = 100.0  # updates/s: a tenth of the real budget, so a tenth of its crowd fits


def frame(number: int) -> Frame:
    return Frame(number, number, "", f"delta {number}".encode(), f"full {number}".encode())


class Crowd:
    """A fan-out on a fake clock, its viewers, and what each was written."""

    def __init__(self, num_viewers: int, tokens: tuple[str, ...] = ()):
        self.now = 0.0
        self.fanout = FanOut(max_buffered=1000, budget=CrowdBudget(BUDGET), clock=lambda: self.now)
        self.viewers = [self.fanout.subscribe(f"10.0.0.{i}") for i in range(num_viewers)]
        self.seats = [self.fanout.subscribe("10.0.1.1", token) for token in tokens]

    def play(self, num_frames: int, gap_s: float = FRAME_S) -> None:
        for number in range(1, num_frames + 1):
            self.now += gap_s
            self.fanout.publish(frame(number))

    @staticmethod
    def written(viewer) -> list[bytes]:
        return [viewer.queue.get_nowait() for _ in range(viewer.queue.qsize())]


def run(scenario):
    """The scenario on a loop of its own (a viewer is written by the current task)."""
    return off_thread(asyncio.run, asyncio.wait_for(scenario(), timeout=10))


def test_the_default_budget_fits_100_viewers_and_gives_300_an_update_a_second():
    """The class's goals: 100 viewers get every frame, 300 at least one update a second."""
    assert 100 / FRAME_S <= VIEWER_UPDATES_PER_S
    assert 300 / VIEWER_UPDATES_PER_S <= 1.0


def test_below_the_budget_every_viewer_gets_every_frame_as_a_delta():
    async def scenario():
        crowd = Crowd(int(BUDGET * FRAME_S))  # exactly fits
        crowd.play(20)
        for viewer in crowd.viewers:
            assert crowd.written(viewer) == [f"delta {n}".encode() for n in range(1, 21)]
        assert crowd.fanout.stats()["update_interval_s"] == pytest.approx(FRAME_S)

    run(scenario)


@pytest.mark.parametrize("num_viewers", [31, 60, 200])
def test_above_the_budget_the_writes_stay_within_it_and_every_viewer_gets_its_turn(num_viewers):
    async def scenario():
        crowd = Crowd(num_viewers)
        num_frames = 100
        crowd.play(num_frames)
        seconds = num_frames * FRAME_S
        written = [crowd.written(viewer) for viewer in crowd.viewers]
        assert sum(map(len, written)) <= BUDGET * seconds + num_viewers  # the first frame: all
        interval = num_viewers / BUDGET
        assert crowd.fanout.stats()["update_interval_s"] == pytest.approx(interval)
        for frames in written:  # each viewer's cadence is len / budget, a frame's gap at most
            assert len(frames) >= seconds / (interval + FRAME_S)

    run(scenario)


def test_the_writes_are_spread_over_the_frames_not_bursts():
    async def scenario():
        crowd = Crowd(90)  # three times what fits: a third of the viewers per frame
        crowd.play(1)  # the first frame goes to all
        for _ in range(30):
            before = sum(v.queue.qsize() for v in crowd.viewers)
            crowd.play(1)
            after = sum(v.queue.qsize() for v in crowd.viewers)
            assert after - before == pytest.approx(BUDGET * FRAME_S, abs=1)

    run(scenario)


def test_a_viewer_that_missed_frames_gets_its_next_one_in_full():
    async def scenario():
        crowd = Crowd(90)
        crowd.play(30)
        for viewer in crowd.viewers:
            numbers, last = [], 0
            for data in crowd.written(viewer):
                kind, number = data.decode().split()
                assert kind == ("delta" if int(number) == last + 1 else "full")
                numbers.append(int(number))
                last = int(number)
            assert len(numbers) >= 10 and any(b - a > 1 for a, b in pairwise(numbers))

    run(scenario)


def test_the_seat_stream_gets_every_frame_and_a_stale_token_does_not():
    async def scenario():
        crowd = Crowd(200, tokens=("seat-token", "old-token"))
        crowd.fanout.seat_tokens = lambda: ("seat-token",)
        crowd.play(20)
        seat, old = crowd.seats
        assert crowd.written(seat) == [f"delta {n}".encode() for n in range(1, 21)]
        assert len(crowd.written(old)) < 20  # a token not the holder's is one of the crowd
        assert crowd.fanout.stats()["num_seat_viewers"] == 1

    run(scenario)


def test_a_still_board_saves_up_no_burst():
    """After a still minute the next frame goes to everyone who fits a second's budget: all of a
    crowd the budget fits, the longest waiting of a larger one (their turns go on after)."""

    async def scenario():
        for num_viewers, first in ((90, 90), (300, int(BUDGET))):
            crowd = Crowd(num_viewers)
            crowd.play(1)
            for viewer in crowd.viewers:
                crowd.written(viewer)
            crowd.play(1, gap_s=60.0)
            got = [v for v in crowd.viewers if crowd.written(v)]
            assert len(got) == first
            crowd.play(1)
            assert sum(len(crowd.written(v)) for v in crowd.viewers) <= BUDGET * FRAME_S + 1

    run(scenario)


def test_a_budget_must_be_positive():
    with pytest.raises(ValueError, match="updates_per_s"):
        CrowdBudget(0)
