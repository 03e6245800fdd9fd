"""The engine-busy clock: a pause or a wait between single steps is nobody's loss."""

import time
from dataclasses import replace

from engine import SamplingParams
from engine.telemetry import Totals
from playground.driver.busy import BusyClock, BusyTime
from tests.playground.boards import request, snapshot, step


def _steps():
    # steps of 0.1 s at t=10 and t=10.1, then a pause of 60 s, then one at t=70.2
    return [step(1, start=10.0, duration=0.1, decode=1), step(2, start=10.1, duration=0.1,
            decode=1), step(3, start=70.2, duration=0.1, decode=1)]  # fmt: skip


def test_a_time_maps_to_the_busy_seconds_up_to_it():
    clock = BusyClock(tuple(_steps()), elapsed_busy=0.3)
    assert round(clock.at(10.05), 6) == 0.05 and round(clock.at(10.15), 6) == 0.15
    assert round(clock.at(40.0), 6) == 0.2  # paused: the clock stands still
    assert round(clock.at(70.25), 6) == 0.25 and round(clock.end, 6) == 0.3
    assert clock.at(None) is None and clock.at(1.0) == 0.0  # before the window: its start
    assert round(BusyClock(tuple(_steps()), elapsed_busy=5.3).at(10.05), 6) == 5.05  # offset


def test_a_clock_moved_along_a_sliding_window_is_the_one_built_afresh():
    steps = [step(i, start=i * 0.5, duration=0.1 + 0.01 * (i % 3), decode=int(i % 4 > 0))
             for i in range(1, 41)]  # fmt: skip
    busy = [sum(s.duration for s in steps[:i] if s.num_tokens) for i in range(1, 41)]
    moved = BusyClock((), 0.0)
    for end in range(1, 41):
        window = tuple(steps[max(0, end - 8) : end])  # each step keeps the last 8 at most
        moved.advance(window, 2.0 + busy[end - 1])
        fresh = BusyClock(window, 2.0 + busy[end - 1])
        times = [0.0, *(s.start + d for s in window for d in (0.0, 0.05, 0.3))]
        assert [round(moved.at(t), 9) for t in times] == [round(fresh.at(t), 9) for t in times]
        assert round(moved.end, 9) == round(fresh.end, 9)
    moved.advance(tuple(steps[:3]), busy[2])  # a window that does not follow on: afresh
    assert round(moved.at(steps[2].start), 9) == round(BusyClock(tuple(steps[:3]), busy[2])
                                                       .at(steps[2].start), 9)  # fmt: skip


def test_waits_ttft_and_preemption_loss_leave_the_pause_out():
    victim = replace(
        request("req-1", status="finished", arrival=10.0, scheduled=10.05, first=10.1,
                finished=70.3, output=3),
        preempted_spans=((10.15, 70.25),), preemption_time_lost=60.1, num_preemptions=1,
    )  # fmt: skip
    live = replace(request("req-2", arrival=10.12), preempted_spans=((10.12, 70.3),))
    snap = snapshot(steps=_steps(), requests=[victim, live],
                    totals=Totals(elapsed_busy=0.3, preemption_time_lost=60.1))  # fmt: skip
    busy = BusyTime()
    shown = busy.convert(snap)
    done = shown.requests[0]
    assert round(done.first_token - done.arrival, 6) == 0.1  # TTFT
    assert round(done.preemption_time_lost, 6) == 0.1  # 10.15..10.2 and 70.2..70.25
    assert [round(s.start, 6) for s in shown.steps] == [0.0, 0.1, 0.2]
    assert round(shown.totals.preemption_time_lost, 6) == round(0.1 + 0.18, 6)  # + the live one
    assert [round(t, 6) for t in shown.ttfts] == [0.1] and round(shown.totals.ttft_p50, 6) == 0.1
    assert round(shown.tpots[0], 6) == round((0.3 - 0.1) / 2, 6)
    again = busy.convert(snap)  # a finished request counts once
    assert len(again.ttfts) == 1 and again.requests[0] is done
    assert BusyTime().convert(snapshot()) == snapshot()  # no steps (a remote server): as it is


def test_the_board_of_a_paused_driver_loses_nothing(driver):
    driver.pause()
    handle = driver.submit("hello there", SamplingParams(max_tokens=4, ignore_eos=True))
    time.sleep(0.6)  # paused with a request waiting
    driver.resume()
    handle.result(timeout=30)
    time.sleep(0.1)
    r = next(r for r in driver.state().snapshot.requests if r.request_id == handle.request_id)
    assert r.first_token - r.arrival < 0.5  # the pause is not time to first token
    assert driver.state().snapshot.totals.ttft_p50 < 0.5
