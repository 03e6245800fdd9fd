"""The control seat on its own: who may drive in each mode, how the seat passes, the rate."""

import pytest

from playground.access.rate_limit import RateLimited, RateLimiter
from playground.access.seat import ControlMode, Role, Seat, SeatPolicy

POLICY = SeatPolicy(term_s=30, idle_s=10, gone_s=3, burst=3, actions_per_s=1)


class Handovers:
    def __init__(self):
        self.count = 0

    def __call__(self):
        self.count += 1


def _seat(mode="seat", **kw) -> tuple[Seat, Handovers]:
    handovers = Handovers()
    seat = Seat(mode, POLICY, on_handover=handovers, **kw)
    for s in ("a", "b", "c"):
        seat.arrive(s, 0.0)
    return seat, handovers


def test_open_mode_lets_every_visitor_drive_but_no_stranger():
    seat, _ = _seat("open")
    assert seat.act("a", 1) is Role.DRIVER and seat.act("b", 1) is Role.DRIVER
    assert seat.act("nobody", 1) is Role.STRANGER and seat.act(None, 1) is Role.STRANGER
    assert seat.view("a", 1).holder is None


def test_the_visitor_who_starts_holds_the_seat_and_the_others_watch():
    seat, handovers = _seat()
    assert seat.view("b", 0).role is Role.FREE
    assert seat.act("a", 1) is Role.DRIVER  # a free seat: taken by the action
    assert seat.holder == "a"
    assert seat.act("b", 2) is Role.WATCHER and seat.holder == "a"
    view = seat.view("b", 2)
    assert view.role is Role.WATCHER and view.holder == "a" and view.left_s == pytest.approx(9)
    assert handovers.count == 0


def test_the_seat_passes_on_leave_to_the_first_present_in_the_queue():
    seat, handovers = _seat()
    seat.act("a", 1)
    assert seat.toggle("c", 1.5) is Role.QUEUED
    assert seat.toggle("b", 2) is Role.QUEUED
    assert seat.view("b", 2).position == 2 and seat.view("a", 2).num_queued == 2
    seat.seen("b", 2.5)
    seat.leave("a", 2.5)  # c has not ticked for 2.5 s: still present (gone_s 3)
    assert seat.holder == "c" and handovers.count == 1
    assert seat.view("c", 2.5).role is Role.DRIVER and seat.view("b", 2.5).position == 1
    seat.seen("b", 4)
    seat.leave("c", 4)
    assert seat.holder == "b" and handovers.count == 2
    seat.leave("b", 5)
    assert seat.holder is None and seat.view("a", 5).role is Role.STRANGER  # a left


def test_the_seat_passes_on_idle_on_term_and_when_the_holder_stops_ticking():
    seat, handovers = _seat()
    seat.act("a", 0)
    for t in range(1, 10):  # acting keeps an uncontested seat past the idle time
        seat.seen("a", t)
    seat.act("a", 9)
    seat.seen("a", 18.5)
    assert seat.holder == "a"
    seat.seen("a", 19.5)  # 10.5 s without an action: idle
    assert seat.holder is None and handovers.count == 1
    seat.act("a", 20)  # free again: the next action takes it
    seat.toggle("b", 20)
    for t in range(21, 51):  # a acts every second, b waits and ticks
        seat.seen("b", t)
        seat.seen("a", t)
        if seat.holder == "a":
            seat.act("a", t)
    assert seat.holder == "b" and handovers.count == 2  # after term_s = 30 s with a queue
    assert seat.view("a", 50).role is Role.WATCHER
    seat.seen("a", 53.5)  # b's page stopped ticking at 50: gone after gone_s
    assert seat.holder is None and handovers.count == 3


def test_a_queued_visitor_who_left_loses_the_place():
    seat, _ = _seat()
    seat.act("a", 0)
    seat.toggle("b", 0)
    seat.toggle("c", 0)
    seat.seen("c", 4)
    seat.toggle("a", 4)  # the holder gives the seat up; b has not ticked since 0
    assert seat.holder == "c" and seat.view("b", 4).role is Role.WATCHER


def test_the_seat_button_takes_gives_up_queues_and_unqueues():
    seat, handovers = _seat()
    assert seat.toggle("a", 0) is Role.DRIVER
    assert seat.toggle("b", 0) is Role.QUEUED
    assert seat.toggle("b", 0.5) is Role.WATCHER  # left the queue
    assert seat.toggle("a", 1) is Role.FREE and handovers.count == 1


def test_locked_mode_lets_only_the_presenter_drive():
    with pytest.raises(ValueError, match="presenter_key"):
        Seat("locked")
    seat, _ = _seat("locked", presenter_key="s3cret")
    seat.arrive("p", 0, key="s3cret")
    seat.arrive("q", 0, key="guess")
    seat.arrive("u", 0, key="s3crét")  # not ASCII: refused, not an error
    assert seat.act("p", 1) is Role.DRIVER
    for s in ("a", "q", "u"):
        assert seat.act(s, 1) is Role.AUDIENCE and seat.toggle(s, 1) is Role.AUDIENCE
    seat.leave("p", 2)
    seat.arrive("p", 3)  # back without the key: audience
    assert seat.act("p", 3) is Role.AUDIENCE


def test_control_actions_are_rate_limited_per_session():
    seat, _ = _seat("open")
    for _ in range(POLICY.burst):
        seat.act("a", 0)
    with pytest.raises(RateLimited, match="too many control actions"):
        seat.act("a", 0)
    assert seat.act("b", 0) is Role.DRIVER  # another session's bucket
    assert seat.act("a", 1.0) is Role.DRIVER  # one token back after a second


def test_a_rate_limited_action_changes_nothing():
    seat, handovers = _seat()
    seat.act("a", 0)  # takes the seat
    seat.toggle("a", 0)  # gives it up
    seat.toggle("a", 0)  # takes it again
    with pytest.raises(RateLimited):
        seat.toggle("a", 0)
    assert seat.holder == "a" and handovers.count == 1


def test_the_rate_limiter_refills_to_its_burst_only():
    rate = RateLimiter(burst=2, per_s=2.0)
    rate.spend("k", 0)
    rate.spend("k", 0)
    with pytest.raises(RateLimited, match="try again in 0.5 s"):
        rate.spend("k", 0)
    rate.spend("k", 100)
    rate.spend("k", 100)
    with pytest.raises(RateLimited):
        rate.spend("k", 100)


@pytest.mark.parametrize("field", ["term_s", "idle_s", "gone_s", "actions_per_s", "burst"])
def test_the_seat_policy_refuses_bad_values(field):
    with pytest.raises(ValueError, match=field):
        SeatPolicy(**{field: 0})
    with pytest.raises(ValueError):
        ControlMode("everyone")
