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


def per_window(fn):
    """`[fn(r) for r in records]` for a window of StepRecords, reusing the previous call's
    list: the next version's window is the last one less the steps that left its front,
    plus the steps new at its end, so only those are computed (per record, as per_step). A
    window that does not continue the last (a rewound frame, another chart's slice) is
    computed whole."""
    one = per_step(fn)
    last: list = [((), [])]  # [(records, values)], swapped whole: readers see one pair

    def window(records) -> list:
        old, values = last[0]
        shared = _overlap(old, records)
        fresh = values[len(old) - shared :] if shared else []
        fresh = fresh + [one(r) for r in records[shared:]]
        last[0] = (tuple(records), fresh)
        return fresh

    return window


def _overlap(old, records) -> int:
    """How many records at the start of `records` end `old`, in order (0 if it does not
    continue `old`): the old window's front slid away, the rest is shared."""
    if not old or not records:
        return 0
    for start, record in enumerate(old):
        if record is records[0]:
            shared = len(old) - start
            if shared <= len(records) and records[shared - 1] is old[-1]:
                return shared
            return 0
    return 0
