"""Each session's own timer ticks less often as more sessions watch (the board itself comes
over the stream); a session with something live of its own keeps the full rate."""

import pytest

from playground.access.audience import Audience, TickPolicy


def test_a_watchers_tick_grows_with_the_audience_up_to_the_cap():
    audience = Audience(TickPolicy(tick_s=0.25, watcher_tick_s=1.0, ticks_per_s=10,
                                   max_interval_s=10.0))  # fmt: skip
    assert audience.interval("s0", now=10.0) == 1.0
    for i in range(1, 40):
        audience.seen(f"s{i}", now=11.0)
    assert audience.interval("s0", now=12.0) == 4.0  # 40 watchers, 10 ticks/s in all
    assert audience.seen("s0", now=12.0) == 40  # a session counts once however often it ticks
    for i in range(40, 400):
        audience.seen(f"s{i}", now=12.0)
    assert audience.interval("s0", now=12.0) == 10.0  # never rarer than the cap
    assert audience.interval("s0", now=12.0, full_rate=True) == 0.25


def test_sessions_that_stop_ticking_leave_the_audience():
    audience = Audience(TickPolicy(watcher_tick_s=0.5, ticks_per_s=1, max_interval_s=2.0))
    audience.seen("gone", now=0.0)
    audience.seen("here", now=3.0)
    assert audience.seen("here", now=4.5) == 1  # "gone" last ticked 4.5 s ago: > 2 x the cap


@pytest.mark.parametrize(
    "kwargs",
    [{"tick_s": 0}, {"ticks_per_s": -1}, {"max_interval_s": float("inf")}, {"tick_s": True},
     {"watcher_tick_s": 300.0}],
)  # fmt: skip
def test_bad_settings_are_refused_naming_the_field(kwargs):
    with pytest.raises(ValueError, match="tick_s|ticks_per_s|max_interval_s"):
        TickPolicy(**kwargs)
