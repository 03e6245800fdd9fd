"""The driver thread's outputs on the event loop: one wake-up per batch, piled-up outputs
merged, refusals raised, heartbeats while nothing comes."""

import asyncio
import threading
import time

import pytest

from engine import CompletionOutput, RequestMetrics, RequestOutput, StopReason
from engine.openmp import off_thread
from playground.outbox import Outbox, merge, outputs
from playground.requests import RequestHandle, RequestRejected


def run(main):
    """asyncio.run(main()) on a thread of its own: the suite's main thread may hold a loop."""
    return off_thread(asyncio.run, main())


def output(rid: str, texts: list[str], deltas: list[str], finished: bool = False):
    completions = [
        CompletionOutput(
            i, text, list(range(len(text))), delta, StopReason.LENGTH if finished else None
        )
        for i, (text, delta) in enumerate(zip(texts, deltas, strict=True))
    ]
    return RequestOutput(rid, "p", [1, 2], completions, finished, RequestMetrics(0.0))


def test_a_batch_posted_from_another_thread_wakes_the_loop_once():
    async def main():
        loop = asyncio.get_running_loop()
        wakeups = []
        real = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = lambda *a: (wakeups.append(a), real(*a))[1]
        outbox = Outbox.of(loop)
        inboxes = [asyncio.Queue() for _ in range(64)]
        poster = threading.Thread(target=lambda: [outbox.post(q, i) for i, q in enumerate(inboxes)])
        poster.start()
        poster.join()  # the loop is blocked here: the whole batch piles up
        for _ in range(3):
            await asyncio.sleep(0)
        assert [q.get_nowait() for q in inboxes] == list(range(64))
        assert len(wakeups) == 1
        outbox.post(inboxes[0], "next")  # the next batch wakes it again
        await asyncio.sleep(0.01)
        assert inboxes[0].get_nowait() == "next" and len(wakeups) == 2

    run(main)


def test_outputs_that_piled_up_come_as_one_with_the_joined_deltas():
    handle = RequestHandle("req-1", None)
    handle.put(output("req-1", ["a"], ["a"]))
    handle.put(output("req-1", ["ab"], ["b"]))
    handle.put(output("req-1", ["abc"], ["c"]))

    async def main():
        seen = []
        async for out in outputs(handle, heartbeat_s=5):
            seen.append(out)
            if len(seen) == 1:  # the driver goes on while the stream reads
                handle.put(output("req-1", ["abcd"], ["d"]))
                handle.put(output("req-1", ["abcde"], ["e"], finished=True))
        return seen

    seen = run(main)
    assert [(o.outputs[0].delta, o.outputs[0].text, o.finished) for o in seen] == [
        ("abc", "abc", False),
        ("de", "abcde", True),
    ]
    assert seen[0].outputs[0].token_ids == [0, 1, 2]


def test_a_refusal_after_outputs_comes_after_them():
    handle = RequestHandle("req-2", None)
    handle.put(output("req-2", ["x"], ["x"]))
    handle.put(RequestRejected("too many", "max_tokens"))

    async def main():
        seen = []
        with pytest.raises(RequestRejected):
            async for out in outputs(handle, heartbeat_s=5):
                seen.append(out)
        return seen

    assert [o.outputs[0].delta for o in run(main)] == ["x"]


def test_nothing_to_read_gives_heartbeats():
    handle = RequestHandle("req-3", None)

    async def main():
        start, beats = time.monotonic(), 0
        async for out in outputs(handle, heartbeat_s=0.05):
            assert out is None
            beats += 1
            if beats == 3:
                return time.monotonic() - start

    assert run(main) >= 0.15


def test_merge_keeps_each_choice_and_refuses_other_shapes():
    two = merge(output("r", ["a", "x"], ["a", "x"]), output("r", ["ab", "xy"], ["b", "y"]))
    assert [(c.index, c.delta, c.text) for c in two.outputs] == [(0, "ab", "ab"), (1, "xy", "xy")]
    assert merge(output("r", ["a"], ["a"]), output("r", ["a", "b"], ["", "b"])) is None
    assert merge(output("r", ["a"], ["a"]), RequestRejected("no", "n")) is None
