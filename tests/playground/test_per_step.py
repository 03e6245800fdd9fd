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


def test_a_sliding_window_computes_only_its_new_steps_and_equals_the_whole():
    calls = []

    def decode_tokens(record):
        calls.append(record.step)
        return record.num_decode_tokens

    window = memo.per_window(decode_tokens)
    records = [step(i, decode=i % 5) for i in range(10)]
    assert window(records[0:6]) == [r.num_decode_tokens for r in records[0:6]]
    calls.clear()
    assert window(records[2:9]) == [r.num_decode_tokens for r in records[2:9]]  # slid by 2
    assert calls == [6, 7, 8]  # only the steps new at its end
    calls.clear()
    assert window(records[2:9]) == [r.num_decode_tokens for r in records[2:9]] and calls == []
    # a window that does not continue the last (a rewound frame: other records) is whole
    other = [step(i, decode=1) for i in range(3, 7)]
    assert window(other) == [1, 1, 1, 1] and calls == [3, 4, 5, 6]
    gap = [records[0], records[5]]  # starts in the last window, but is not its tail
    assert window(records[3:7]) == [r.num_decode_tokens for r in records[3:7]]
    assert window(gap) == [records[0].num_decode_tokens, records[5].num_decode_tokens]
    assert window([]) == []
