"""The board refreshes its charts less often as more sessions watch it."""

import pytest

from playground.access.audience import Audience


def test_slowdown_grows_with_the_sessions_that_ticked_recently():
    audience = Audience(window_s=3.0, full_rate=4)
    for i in range(4):
        assert audience.slowdown(f"s{i}", now=10.0) == 1.0
    for i in range(4, 8):
        audience.seen(f"s{i}", now=11.0)
    assert audience.slowdown("s0", now=12.0) == 2.0  # 8 watchers, 4 at full rate
    assert audience.seen("s0", now=12.0) == 8  # a session counts once however often it ticks


def test_sessions_that_stop_ticking_leave_the_audience():
    audience = Audience(window_s=3.0, full_rate=1)
    audience.seen("gone", now=0.0)
    audience.seen("here", now=2.0)
    assert audience.slowdown("here", now=3.5) == 1.0  # "gone" last ticked 3.5 s ago


@pytest.mark.parametrize("kwargs", [{"window_s": 0}, {"full_rate": 0}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError, match="window_s|full_rate"):
        Audience(**kwargs)
