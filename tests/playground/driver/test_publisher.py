"""Publisher: a BoardState at most every PUBLISH_INTERVAL unless forced; watched details."""

import time

from playground.driver.clock import RunClock
from playground.driver.lanes import Lane, Lanes
from playground.driver.publisher import MAX_WATCHED, PUBLISH_INTERVAL, Publisher
from playground.handles import Ledger


def test_a_board_state_comes_when_something_changed_and_not_too_often(make_engine):
    lanes, ledger, clock, pub = (
        Lanes([Lane("main", make_engine())]),
        Ledger(),
        RunClock(2),
        Publisher(),
    )
    pub.publish(True, lanes, ledger, None, clock)
    first = pub.state
    assert first.version == 1 and first.lanes == ("main",) and first.pace == 2.0
    pub.dirty = True
    pub.publish(False, lanes, ledger, None, clock)  # too soon after the last one
    assert pub.state is first
    time.sleep(PUBLISH_INTERVAL)
    pub.publish(False, lanes, ledger, None, clock)
    assert pub.state.version == 2 and not pub.dirty
    time.sleep(PUBLISH_INTERVAL)
    pub.publish(False, lanes, ledger, None, clock)  # nothing changed
    assert pub.state.version == 2
    clock.pause()
    pub.publish(True, lanes, ledger, None, clock)  # forced
    assert pub.state.version == 3 and pub.state.paused


def test_only_the_latest_watched_requests_keep_a_detail(make_engine):
    lanes, pub = Lanes([Lane("main", make_engine())]), Publisher()
    for i in range(MAX_WATCHED + 2):
        pub.watch(f"r{i}", lambda rid: f"detail of {rid}")
    pub.publish(True, lanes, Ledger(), None, RunClock("max"))
    kept = [f"r{i}" for i in range(2, MAX_WATCHED + 2)]
    assert pub.state.details == {rid: f"detail of {rid}" for rid in kept}
    pub.forget()
    pub.publish(True, lanes, Ledger(), None, RunClock("max"))
    assert pub.state.details == {}
