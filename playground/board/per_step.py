"""A memo for what a chart reads from one step: computed once per StepRecord, not per redraw.

Consecutive board versions share all but a step or two of their step window, and they share
the StepRecord objects themselves (the driver converts a step to the busy clock once:
playground/driver/busy.py), so a per-step value is looked up by the record's identity
instead of being recomputed over the whole window for every version. A rewound frame's
records are other objects: they are computed, and kept, the same way.
"""

import functools

MAX_MEMO = 4096  # records remembered per function: a few windows of 512 steps


def per_step(fn):
    """`fn(record)`, remembered per record object (the memo starts over once it is full)."""
    memo: dict[int, tuple[object, object]] = {}  # id(record) -> (record, value)

    @functools.wraps(fn)
    def remembered(record):
        hit = memo.get(id(record))
        if hit is not None and hit[0] is record:  # the record itself, not a reused id
            return hit[1]
        if len(memo) >= MAX_MEMO:
            memo.clear()
        value = fn(record)
        memo[id(record)] = (record, value)
        return value

    return remembered
