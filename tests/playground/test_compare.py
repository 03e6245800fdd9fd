"""Compare mode: both lanes on one engine-busy x axis, and partial figures marked partial."""

from dataclasses import replace

from playground.board import cards
from playground.board.compare import COMPARE_KEYS, busy_clock, compare_specs
from playground.board.state import LaneStats
from tests.playground.boards import busy_board, snapshot, step

LANES = ("continuous", "static")


def _board(fast_done: int = 4, slow_done: int = 4):
    """The same 4 requests: continuous in 10 steps of 20 ms, static in 20 of 30 ms (and an
    idle step each, which costs no busy time)."""
    fast = [step(n, decode=2, running=2, duration=0.02) for n in range(1, 11)]
    slow = [step(n, decode=1, running=1, duration=0.03) for n in range(1, 21)]
    fast.append(step(11, duration=0.5))  # nothing scheduled
    stats = {
        "continuous": LaneStats("continuous", "continuous", 4, fast_done, 10, 0.2, 0.2, 10),
        "static": LaneStats("static", "static", 4, slow_done, 20, 0.6, 0.6, 20),
    }
    board = busy_board(num_users=2, num_steps=2)
    snaps = {"continuous": snapshot(steps=fast), "static": snapshot(steps=slow, batching="static")}
    return replace(board, lanes=LANES, snapshots=snaps, stats=stats)


def test_both_lanes_share_one_busy_seconds_axis_and_the_slower_ends_later():
    board = _board()
    clock = busy_clock(board, "continuous")
    assert clock[1] == 0.02 and clock[10] == 0.2 and clock[11] == 0.2  # idle: no busy time
    specs = compare_specs(board)
    assert set(specs) == set(COMPARE_KEYS)
    ranges = {key: spec["layout"]["xaxis"]["range"] for key, spec in specs.items()}
    assert len({tuple(r) for r in ranges.values()}) == 1  # one axis for every chart
    assert ranges["cmp_queue0"][1] >= 0.6
    last = {key: max(x for t in spec["data"] for x in t["x"] if x is not None)
            for key, spec in specs.items() if spec["data"][0]["x"]}  # fmt: skip
    assert last["cmp_batch1"] == 0.6 and last["cmp_batch0"] == 0.2  # static ends later
    assert specs["cmp_batch0"]["layout"]["xaxis"]["title"]["text"] == "engine-busy seconds"


def test_a_lane_still_running_shows_its_figures_as_partial():
    html = cards.render_scoreboard(_board(fast_done=4, slow_done=1))
    static_row = html[html.index("static</span>") :]
    assert "partial: 1 finished" in static_row and html.count("pg-partial") == 2
    assert "×</b>" not in html  # no verdict until both lanes are done
    done = cards.render_scoreboard(_board())
    assert "pg-partial" not in done and "<b>3.00×</b>" in done
