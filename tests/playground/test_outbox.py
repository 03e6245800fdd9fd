"""The driver thread's outputs on the event loop: one wake-up per batch, piled-up outputs
merged, refusals raised, heartbeats while nothing comes; a stream interval holds outputs back
on the driver thread until they have enough new tokens; the driver can wait until the loop
has sent a step's outputs, and gives up on a loop that does not run."""

import asyncio
import threading
import time

import pytest

from engine import CompletionOutput, RequestMetrics, RequestOutput, StopReason
from engine.cpu.openmp import off_thread
from playground.handles import RequestHandle, RequestRejected
from playground.server.outbox import Mailbox, Outbox, StreamInterval, merge, outputs, wait_sent
from tests.playground.driving import loop_on_thread


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
        inboxes = [Mailbox(loop) for _ in range(64)]
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


def test_wait_sent_returns_once_the_readers_a_batch_woke_have_run():
    with loop_on_thread() as loop:
        seen = []

        async def reader(box: Mailbox):
            for _ in range(3):
                await box.wait(5)
                time.sleep(0.01)  # a reader's work holds the loop (a stream writing its chunk)
                seen.append(box.get_nowait())

        boxes = [Mailbox(loop) for _ in range(8)]
        readers = [asyncio.run_coroutine_threadsafe(reader(b), loop) for b in boxes]
        outbox = asyncio.run_coroutine_threadsafe(_outbox_of_running_loop(), loop).result(5)
        for step in range(3):  # as the driver thread does after each step
            outbox.post(boxes[0], (step, 0))
            time.sleep(0.005)  # the loop delivers that one before the rest are posted
            for i, box in enumerate(boxes[1:], 1):
                outbox.post(box, (step, i))
            start = time.monotonic()
            wait_sent(5)
            assert sorted(seen) == [(s, i) for s in range(step + 1) for i in range(8)]
            assert 0.06 < time.monotonic() - start < 2  # waited for the readers' work
        wait_sent(5)  # nothing posted since: no wait
        assert outbox.sent.is_set() and not outbox.stalled
        for r in readers:
            r.result(5)


async def _outbox_of_running_loop() -> Outbox:
    return Outbox.of(asyncio.get_running_loop())


def test_wait_sent_gives_up_on_a_busy_loop_and_never_waits_for_one_that_does_not_run():
    with loop_on_thread() as loop:
        outbox, box = Outbox.of(loop), Mailbox(loop)
        busy = threading.Event()
        loop.call_soon_threadsafe(busy.wait, 5)  # a callback that holds the loop
        outbox.post(box, "a")
        start = time.monotonic()
        wait_sent(0.1)
        assert time.monotonic() - start >= 0.1 and outbox.stalled
        outbox.post(box, "b")
        start = time.monotonic()
        wait_sent(0.1)  # stalled: the next steps do not wait for it
        assert time.monotonic() - start < 0.05
        busy.set()  # the loop goes on: it delivers, and is waited for again
        for _ in range(100):
            if outbox.sent.is_set():
                break
            time.sleep(0.01)
        assert [box.get_nowait() for _ in range(len(box))] == ["a", "b"]
        assert outbox.sent.is_set() and not outbox.stalled
    idle = asyncio.new_event_loop()  # never runs
    outbox = Outbox.of(idle)
    outbox.post(Mailbox(idle), "c")
    start = time.monotonic()
    wait_sent(0.1)
    assert time.monotonic() - start < 0.05 and not outbox.stalled
    idle.close()


def test_a_mailbox_wakes_its_reader_at_once_or_at_the_timeout():
    async def main():
        loop = asyncio.get_running_loop()
        box = Mailbox(loop)
        start = time.monotonic()
        assert not await box.wait(0.05) and time.monotonic() - start >= 0.05
        loop.call_later(0.01, box.put_nowait, "a")
        start = time.monotonic()
        assert await box.wait(5) and time.monotonic() - start < 1
        box.put_nowait("b")
        assert await box.wait(5)  # items there already: no waiting
        assert [box.get_nowait() for _ in range(len(box))] == ["a", "b"]
        reader = asyncio.ensure_future(box.wait(5))
        await asyncio.sleep(0)
        reader.cancel()  # a reader that goes away leaves no waiter behind
        await asyncio.sleep(0)
        box.put_nowait("c")
        assert len(box) == 1 and await box.wait(5) and box.get_nowait() == "c"

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


def growing(rid: str, text: str) -> list[RequestOutput]:
    """One output per character of `text` (a token each), the last one finished."""
    outs = []
    for n in range(1, len(text) + 1):
        outs.append(output(rid, [text[:n]], [text[n - 1]], finished=n == len(text)))
    return outs


def test_a_stream_interval_sends_the_first_then_every_nth_token_and_the_last():
    sent = []
    gate = StreamInterval(3, sent.append)
    for out in growing("r", "abcdefgh"):
        gate(out)
    assert [(o.outputs[0].delta, len(o.outputs[0].token_ids), o.finished) for o in sent] == [
        ("a", 1, False),  # the first at once
        ("bcd", 4, False),
        ("efg", 7, False),
        ("h", 8, True),  # the last at once, whatever it holds
    ]
    assert "".join(o.outputs[0].delta for o in sent) == "abcdefgh"


def test_stream_interval_one_sends_every_token_and_none_sends_only_the_last():
    every = []
    gate = StreamInterval(1, every.append)
    for out in growing("r", "abcd"):
        gate(out)
    assert [o.outputs[0].delta for o in every] == ["a", "b", "c", "d"]
    last = []
    gate = StreamInterval(None, last.append)
    for out in growing("r", "abcd"):
        gate(out)
    assert [(o.outputs[0].delta, o.outputs[0].text, o.finished) for o in last] == [
        ("abcd", "abcd", True)
    ]


def test_a_stream_interval_sends_what_it_held_before_a_refusal_or_another_shape():
    sent = []
    gate = StreamInterval(5, sent.append)
    first, second, third = growing("r", "abcd")[:3]
    gate(first)
    gate(second)
    gate(third)
    refusal = RequestRejected("gone", "prompt")
    gate(refusal)
    assert [o.outputs[0].delta for o in sent[:2]] == ["a", "bc"]
    assert sent[2] is refusal
    sent.clear()
    gate = StreamInterval(5, sent.append)
    gate(output("r", ["a"], ["a"]))
    gate(output("r", ["ab"], ["b"]))
    two = output("r", ["abc", "x"], ["c", "x"])  # another set of completions: no merge
    gate(two)
    assert [o.outputs[0].delta for o in sent] == ["a", "b"]
    assert gate.held is two


def test_outputs_with_a_stream_interval_reach_the_loop_merged():
    handle = RequestHandle("req-4", None)

    async def main():
        seen = []
        stream = outputs(handle, heartbeat_s=5, stream_interval=4)
        first = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.01)  # listening now
        for out in growing("req-4", "abcdefghij"):
            handle.put(out)
        seen.append(await first)
        async for out in stream:
            seen.append(out)
        return seen

    seen = run(main)
    assert "".join(o.outputs[0].delta for o in seen) == "abcdefghij"
    assert seen[-1].finished and len(seen) <= 4  # a, bcde, fghi, j (some merged on the loop)
