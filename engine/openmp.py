"""The engine's CPU threads, and a trap in how libgomp treats them.

torch's CPU kernels run on OpenMP (libgomp). Each thread that runs a parallel op keeps a team
of worker threads for as long as it lives. Once the process holds more of those threads than
it has cores, libgomp stops letting idle workers spin between ops: they sleep, and every op
of the forward then waits for its workers to wake. A server that loads the model on its main
thread and steps it on another holds two teams. On 2 cores the bench workload ran at 196
tok/s in bfloat16 that way, against 243 tok/s when one thread both loaded and stepped.

`off_thread` runs a call on a short-lived thread, whose team ends with it, so that the thread
that steps the engine is the only one that keeps a team.
"""

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def off_thread(fn: Callable[..., T], *args, **kwargs) -> T:
    """`fn(*args, **kwargs)` run on a thread of its own; its result, or its exception."""
    result: list = []

    def call():
        try:
            result.append((True, fn(*args, **kwargs)))
        except BaseException as exc:  # handed to the caller below
            result.append((False, exc))

    thread = threading.Thread(target=call, name="engine-load", daemon=True)
    thread.start()
    thread.join()
    ok, value = result[0]
    if not ok:
        raise value
    return value
