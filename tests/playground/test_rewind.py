"""The board after step k: records rewound to the frame, charts with a cursor at k."""

import json

from playground.board.state import BoardState, LaneStats
from playground.handles import RequestRecord
from playground.record.rewind import rewound_figures, rewound_state
from playground.workload.users import UserView
from tests.playground.boards import request, snapshot, step


def _board(snap, records, users=()) -> BoardState:
    stats = LaneStats("main", "continuous", 2, 1, 5, 1.0, None, None)
    return BoardState(1, ("main",), {"main": snap}, {"main": stats}, tuple(records), users,
                      "chat_burst", True, None, 9.0)  # fmt: skip


def test_the_cards_records_are_rewound_and_later_requests_drop_out():
    live_records = [
        RequestRecord("a", "user:Ada", "hi", 0.0, text="one two three", num_output_tokens=3,
                      stop_reason="eos", finished=True, ttft=0.2),
        RequestRecord("b", "user:Bo", "yo", 0.5, text="later", num_output_tokens=1),
    ]  # fmt: skip
    steps = [step(i, start=i * 0.1, decode=1, running=1, used=2) for i in range(1, 6)]
    live = _board(snapshot(steps=steps, requests=[request("a", status="finished")]),
                  live_records)  # fmt: skip
    then = snapshot(steps=steps[:3], requests=[
        request("a", arrival=0.0, scheduled=0.1, first=0.2, text="one", output=1, blocks=[3, 4])
    ])  # fmt: skip
    users = (UserView("Ada", "#123456", "user:Ada", "thinking", "a", 1, 0, None),)
    state = rewound_state(live, then, users)
    (a,) = state.records
    assert (a.text, a.num_output_tokens, a.finished, a.stop_reason) == ("one", 1, False, None)
    assert state.snapshot is then and state.users == users and state.records[0].ttft

    figures = {k: json.loads(v) for k, v in rewound_figures(state, (1, 5), live_end=0.6).items()}
    batch = figures["batch"]["layout"]
    assert batch["shapes"][0]["x0"] == 3 and batch["xaxis"]["range"] == [0.5, 5.5]
    assert batch["title"]["text"].startswith("Step 3: 0 prefill + 1 decode tokens of 64")
    assert figures["queue"]["data"][0]["x"] == [1, 2, 3]
    timeline = figures["timeline"]["layout"]
    assert timeline["shapes"][0]["x0"] == 0.35 and timeline["xaxis"]["range"][1] == 0.6
    assert figures["kv"]["layout"]["title"]["text"].startswith("KV blocks after step 3")
    kv = figures["kv"]["data"][0]["z"][0]
    assert kv[3] == kv[4] and kv[3] != kv[0]  # blocks 3 and 4 held by a, block 0 free
