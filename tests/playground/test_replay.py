"""Replay files: captured by the driver, loaded back (every field checked), rerun exactly."""

import json

import pytest

from engine import EngineConfig, FieldError, SamplingParams
from playground.record.replay import Replay
from playground.record.rerun import ab, ab_table, compare_outputs, run_offline
from playground.workload.users import UserProfile, Workload
from tests.playground.driving import fixed, settled
from tests.tiny_models import TINY_ENGINE


def _captured(driver, tmp_path) -> Replay:
    """A staggered workload of greedy requests (one cancelled after 3 tokens, one seeded
    sample), run on the board, written and loaded back."""
    greedy = [driver.submit(f"question {i} " * (1 + i % 3), fixed(6 + i)) for i in range(4)]
    seeded = driver.submit("a sampled one", SamplingParams(max_tokens=9, seed=7, top_k=20))
    cancelled = driver.submit("cut me short", fixed(30))
    for out in cancelled:
        if len(out.token_ids) >= 3:
            driver.abort(cancelled.request_id)
            break
    late = driver.submit([{"role": "user", "content": "a chat turn"}], fixed(5))
    for h in [*greedy, seeded, cancelled, late]:
        h.result(timeout=60)
    settled(driver, lambda s: all(r.finished for r in s.records))
    path = driver.write_replay(tmp_path / "run.replay.json")
    return Replay.load(path)


def test_a_replay_reruns_exactly_offline_and_on_the_board(driver, make_engine, tmp_path):
    replay = _captured(driver, tmp_path)
    assert len(replay.requests) == 7 and replay.config == driver.config
    cut = next(r for r in replay.requests if r.output["stop_reason"] == "cancelled")
    assert cut.cancel_after_tokens == len(cut.output["token_ids"]) >= 3
    assert replay.requests[-1].prompt == [{"role": "user", "content": "a chat turn"}]
    results = run_offline(make_engine(), replay)
    assert compare_outputs(replay, results) == []
    assert results[cut.request_id].stop_reason.value == "cancelled"
    static = run_offline(make_engine(batching="static"), replay)
    assert compare_outputs(replay, static) == []

    driver.start_replay(replay)
    state = settled(driver, lambda s: len(s.records) == 7 and all(r.finished for r in s.records))
    texts = sorted(r.text for r in state.records)
    assert texts == sorted(r.output["text"] for r in replay.requests)


def test_an_ab_of_two_policies_on_one_file_sits_side_by_side(driver, make_engine, tmp_path):
    replay = _captured(driver, tmp_path)
    configs = {"A: continuous": EngineConfig(**TINY_ENGINE),
               "B: static": EngineConfig(**TINY_ENGINE, batching="static")}  # fmt: skip
    results = ab(lambda cfg: make_engine(cfg), replay, configs)
    assert [r.name for r in results] == list(configs)
    for r in results:
        assert compare_outputs(replay, r.outputs) == [] and len(r.outputs) == 7
    table = ab_table(results).splitlines()
    assert table[0] == "| | A: continuous | B: static |"
    assert "| batching | continuous | static |" in table
    driver.start_replay(replay, compare=True)  # on the board: the compare lanes
    state = settled(driver, lambda s: s.compare and all(
        st.num_finished == st.num_submitted == 7 for st in s.stats.values()))  # fmt: skip
    assert state.lanes == ("continuous", "static")


def test_a_preset_workload_replays_its_users(driver, tmp_path):
    profile = UserProfile("Ada", "#000", max_tokens=6, temperature=0.0, ignore_eos=True,
                          think_time=(0.0, 0.1), max_requests=2)  # fmt: skip
    driver.reset(workload=Workload("mini", [profile]))
    settled(driver, lambda s: s.users and s.users[0].state == "done", timeout=60)
    replay = Replay.load(driver.write_replay(tmp_path / "w.json"))
    assert replay.workload == "mini" and [r.owner for r in replay.requests] == ["user:Ada"] * 2
    assert replay.requests[1].arrival_s > replay.requests[0].arrival_s
    driver.start_replay(replay)
    state = settled(driver, lambda s: s.users and s.users[0].state == "done", timeout=60)
    assert state.workload == "replay of mini" and state.users[0].name == "Ada"
    assert [r.text for r in state.records] == [r.output["text"] for r in replay.requests]


def _file(**over):
    base = {"format": "cb-playground-replay", "version": 1, "engine": {"max_num_seqs": 4},
            "requests": [{"request_id": "a", "arrival_s": 0.0, "prompt": "hi",
                          "params": {"max_tokens": 4}}]}  # fmt: skip
    for key, value in over.items():
        if key.startswith("r_"):
            base["requests"][0][key[2:]] = value
        else:
            base[key] = value
    return base


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"format": "x"}, "format"),
        ({"version": 2}, "version"),
        ({"engine": {"max_num_seqs": 0}}, "engine.max_num_seqs"),
        ({"engine": {"warp_speed": 1}}, "engine.warp_speed"),
        ({"requests": {}}, "requests"),
        ({"r_params": {"temperature": -1}}, "requests[0].params.temperature"),
        ({"r_prompt": []}, "requests[0].prompt"),
        ({"r_arrival_s": "soon"}, "requests[0].arrival_s"),
        ({"r_request_id": ""}, "requests[0].request_id"),
        ({"r_colour": "red"}, "requests[0].colour"),
        ({"r_cancel_after_tokens": 1.5}, "requests[0].cancel_after_tokens"),
    ],
)
def test_a_bad_file_is_refused_naming_the_field(over, field):
    with pytest.raises(FieldError) as err:
        Replay.from_json(_file(**over))
    assert err.value.field == field and str(err.value).startswith(field)


def test_a_file_round_trips(tmp_path):
    replay = Replay.from_json(_file())
    again = Replay.load(replay.write(tmp_path / "x.json"))
    assert again == replay
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(FieldError, match="file"):
        Replay.load(tmp_path / "bad.json")
    assert json.loads((tmp_path / "x.json").read_text())["engine"]["max_num_seqs"] == 4
