"""A visitor's replay file: public limits per request, only the board's knobs, at most 256."""

import pytest

from engine import EngineConfig, FieldError
from playground.access.limits import PublicLimits
from playground.record.replay import Replay
from playground.record.replay_door import MAX_BOARD_REPLAY_REQUESTS, board_replay


def _replay(num=2, **engine):
    return Replay.from_json({
        "format": "cb-playground-replay", "version": 1, "engine": engine,
        "requests": [{"request_id": f"r{i}", "arrival_s": i * 0.5, "prompt": "hello there",
                      "params": {"max_tokens": 8}, "owner": "user:Ada" if i == 0 else
                      "visitor:someone-else"} for i in range(num)],
    })  # fmt: skip


def test_only_the_boards_knobs_are_taken_and_limits_apply(char_tokenizer):
    base = EngineConfig(num_kv_blocks=512, max_waiting=64)
    replay = _replay(batching="static", max_num_seqs=4, torch_compile=True,
                     max_waiting=5000, model_impl="transformers")  # fmt: skip
    checked = board_replay(replay, PublicLimits(default_timeout_s=60), char_tokenizer, base)
    c = checked.config
    assert (c.batching, c.max_num_seqs) == ("static", 4)
    assert (c.torch_compile, c.max_waiting, c.model_impl) == (False, 64, "auto")
    assert c.num_kv_blocks == 512  # the file's None (sized from memory) keeps the board's
    assert all(r.params.timeout_s == 60 for r in checked.requests)
    assert [r.owner for r in checked.requests] == ["user:Ada", "replay"]


@pytest.mark.parametrize(
    ("replay", "limits", "field"),
    [
        (_replay(MAX_BOARD_REPLAY_REQUESTS + 1), PublicLimits(), "requests"),
        (_replay(num_kv_blocks=100_000), PublicLimits(), "engine.num_kv_blocks"),
        (_replay(max_num_batched_tokens=8192), PublicLimits(), "engine.max_num_batched_tokens"),
        (_replay(), PublicLimits(max_tokens=4), "requests[0].max_tokens"),
        (_replay(), PublicLimits(max_prompt_tokens=3), "requests[0].prompt"),
    ],
)
def test_a_file_past_the_public_limits_is_refused_naming_the_field(
    replay, limits, field, char_tokenizer
):
    with pytest.raises(FieldError) as err:
        board_replay(replay, limits, char_tokenizer, EngineConfig(num_kv_blocks=64))
    assert err.value.field == field and str(err.value).startswith(field)
