"""From the driver thread to the event loop: each request's RequestOutputs, in order.

The driver thread hands over a step's outputs (one per open stream) through one Outbox per
event loop, which wakes the loop once for the lot: asyncio's `call_soon_threadsafe` writes to
the loop's self-pipe on every call, and a wake-up per stream per step is CPU taken from the
forward on a small machine. A stream that falls behind (a busy loop) reads the outputs that
piled up as one, as vLLM's output collector merges them: one chunk with the joined text, not
one chunk per token to catch up with.

Each stream waits on a Mailbox: a deque and one future at a time, its heartbeat one timer
handle per wait. (An asyncio.Queue read under `asyncio.timeout` costs several times that in
Python per output, on the loop that writes every stream.)

`StreamInterval` holds a request's outputs back on the driver thread until it has enough new
tokens (vLLM's `--stream-interval`), or until it finishes (a non-streamed response needs only
its last output): the event loop does not even wake for the others.

`wait_sent` lets the driver thread wait, after a step, until the loops have sent what it
posted: a loop that wakes mid-forward to send a step's chunks takes a core from one of the
forward's two OpenMP threads while the other waits for it, and that cost more than the few
milliseconds the next step now waits for the sending.
"""

import asyncio
import contextlib
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import replace

from engine import RequestOutput
from playground.handles import RequestHandle

_outboxes: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Outbox]" = (
    weakref.WeakKeyDictionary()
)
_outboxes_lock = threading.Lock()  # made on the loops' threads, read by wait_sent's


class Mailbox:
    """One stream's items on its event loop, in order; awaited with a timeout."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._items: deque = deque()
        self._waiter: asyncio.Future | None = None

    def put_nowait(self, item) -> None:
        """On the loop's thread (Outbox delivers with it)."""
        self._items.append(item)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def __len__(self) -> int:
        return len(self._items)

    def get_nowait(self):
        return self._items.popleft()

    async def wait(self, timeout: float) -> bool:
        """Until an item is there or `timeout` s have passed: whether one is."""
        if not self._items:
            self._waiter = waiter = self._loop.create_future()
            timer = self._loop.call_later(timeout, _wake, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        return bool(self._items)


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Outbox:
    """Items posted by any thread, delivered to their Mailboxes on `loop`."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = weakref.ref(loop)  # weakly: the registry's key, so a loop gone goes
        self._lock = threading.Lock()
        self._items: list[tuple[Mailbox, object]] = []
        # clear from a batch's wake-up until the loop has run the readers it woke
        self.sent = threading.Event()
        self.sent.set()
        self._wakeups = 0  # batches posted, so a batch's `sent` ignores one posted after it
        self.stalled = False  # a wait_sent gave up on this loop; no more waits till it sends

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> "Outbox":
        """The loop's outbox (on the loop's thread)."""
        with _outboxes_lock:
            outbox = _outboxes.get(loop)
            if outbox is None:
                outbox = _outboxes[loop] = cls(loop)
        return outbox

    def post(self, inbox: Mailbox, item) -> None:
        """Any thread: `item` goes to `inbox`; the first item of a batch wakes the loop."""
        with self._lock:
            self._items.append((inbox, item))
            if len(self._items) > 1:  # a wake-up is on its way
                return
            self._wakeups += 1
            self.sent.clear()
        loop = self._loop()
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the event loop closed
                loop.call_soon_threadsafe(self._deliver)
                return
        self.sent.set()  # no loop to send it: nothing to wait for

    @property
    def sending(self) -> bool:
        """Whether a wake-up is on its way to a loop that runs and has not stalled."""
        loop = self._loop()
        running = loop is not None and loop.is_running()
        return running and not self.stalled and not self.sent.is_set()

    def _deliver(self) -> None:
        with self._lock:
            items, self._items = self._items, []
            batch = self._wakeups
        for inbox, item in items:
            inbox.put_nowait(item)  # schedules each woken reader, in order
        self.stalled = False
        asyncio.get_running_loop().call_soon(self._sent, batch)  # after those readers have run

    def _sent(self, batch: int) -> None:
        with self._lock:
            if batch == self._wakeups:  # not while a batch posted since is on its way
                self.sent.set()


def wait_sent(timeout: float) -> None:
    """On the thread that posts (the driver, after a step): until every loop it woke has
    delivered the items and run the readers they woke (a stream writes its chunks then), at
    most `timeout` s in all. A loop that does not run is not waited for; one that does not
    answer in time is not waited for again until it has delivered."""
    deadline = time.monotonic() + timeout
    with _outboxes_lock:
        waking = [o for o in _outboxes.values() if o.sending]
    for outbox in waking:
        if not outbox.sent.wait(max(0.0, deadline - time.monotonic())):
            outbox.stalled = True
            return


class StreamInterval:
    """On the driver thread: a request's outputs for `send`, each once it has `every` new
    tokens (the most of any of its completions) since the last one sent; the first and the
    last go at once, held ones are merged into the next. `every=None`: only the last. A
    refusal or an error goes at once, after what was held."""

    def __init__(self, every: int | None, send: Callable[[object], None]):
        self.every, self.send = every, send
        self.held: RequestOutput | None = None
        self.num_sent: int | None = None  # tokens as of the last output sent; None: none sent

    def __call__(self, item) -> None:
        held, self.held = self.held, None
        if held is not None:
            merged = merge(held, item)
            if merged is None:  # not one to merge with: what was held goes first
                self._send(held, _num_tokens(held))
            else:
                item = merged
        if not isinstance(item, RequestOutput):
            self.send(item)
            return
        num_tokens = _num_tokens(item)
        if item.finished or self._due(num_tokens):
            self._send(item, num_tokens)
        else:
            self.held = item

    def _due(self, num_tokens: int) -> bool:
        if self.every is None:
            return False
        return self.num_sent is None or num_tokens - self.num_sent >= self.every

    def _send(self, out: RequestOutput, num_tokens: int) -> None:
        self.num_sent = num_tokens
        self.send(out)


async def outputs(handle: RequestHandle, heartbeat_s: float, stream_interval: int | None = 1):
    """The handle's RequestOutputs without blocking the event loop, at most one per
    `stream_interval` new tokens (None: the last only; see StreamInterval), those that piled
    up merged into one, plus a None every `heartbeat_s` without one. A refusal the driver
    hands over is raised."""
    loop = asyncio.get_running_loop()
    inbox, outbox = Mailbox(loop), Outbox.of(loop)
    handle.listen(StreamInterval(stream_interval, lambda item: outbox.post(inbox, item)))
    while True:
        if not await inbox.wait(heartbeat_s):
            yield None
            continue
        item = inbox.get_nowait()
        while isinstance(item, RequestOutput) and not item.finished and inbox:
            later = inbox.get_nowait()
            merged = merge(item, later)
            if merged is None:
                yield item
                item = later
            else:
                item = merged
        if isinstance(item, Exception):
            raise item
        yield item
        if item.finished:
            return


def merge(earlier: RequestOutput, later: RequestOutput | Exception) -> RequestOutput | None:
    """`later` with `earlier`'s text deltas in front (vLLM's RequestOutput.add), or None
    where they do not hold the same completions, or `later` is no output."""
    if not isinstance(later, RequestOutput):
        return None
    if [c.index for c in earlier.outputs] != [c.index for c in later.outputs]:
        return None
    joined = [
        replace(b, delta=a.delta + b.delta)
        for a, b in zip(earlier.outputs, later.outputs, strict=True)
    ]
    return replace(later, outputs=joined)


def _num_tokens(out: RequestOutput) -> int:
    return max((len(c.token_ids) for c in out.outputs), default=0)
