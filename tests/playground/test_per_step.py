"""The per-step memo: a record's value is computed once, another record's afresh."""

from playground.board import per_step as memo
from tests.playground.boards import step


def test_a_record_is_computed_once_and_an_equal_copy_again(monkeypatch):
    calls = []

    @memo.per_step
    def decode_tokens(record):
        calls.append(record.step)
        return record.num_decode_tokens

    first, copy = step(1, decode=3), step(1, decode=3)
    assert decode_tokens(first) == decode_tokens(first) == 3 and calls == [1]
    assert decode_tokens(copy) == 3 and calls == [1, 1]  # equal, but not the same record
    monkeypatch.setattr(memo, "MAX_MEMO", 2)
    decode_tokens(step(2))  # full: it starts over
    assert decode_tokens(first) == 3 and calls == [1, 1, 2, 1]
