"""The engine's CPU threads, and three traps in how libgomp treats them.

torch's CPU kernels run on OpenMP (libgomp). Each thread that runs a parallel op keeps a team
of worker threads for as long as it lives.

1. Too many teams. Once the process holds more OpenMP threads than it has cores, libgomp stops
   letting idle workers spin between ops: they sleep, and every op of the forward waits for
   its workers to wake. A server that loads the model on one thread and steps it on another
   holds two teams. `off_thread` runs a call (the load) on a short-lived thread, whose team
   ends with it, so the thread that steps the engine is the only one that keeps a team.
2. Spinning too long. By default an idle worker spins 300,000 times before it sleeps; beside
   anything else that runs (a browser, the HTTP clients, the event loop) the spinning worker
   holds a core the late one needs, and every op waits a time slice. `load_torch` loads torch,
   and so libgomp, which reads its settings once, with GOMP_SPINCOUNT=SPIN_COUNT, and leaves
   the process environment as it was, so programs it starts (a peer under benchmark) do not
   inherit it. Importing this module calls it; engine/cpu/__init__.py imports it first.
3. A thread of the same process at the same priority. A server's event loop, woken to stream
   a step's tokens, pre-empts one thread of the team mid-op while the other waits at the op's
   barrier, so its CPU time is paid about twice. `lower_priority` runs such a thread at a
   higher nice value; it then answers later, so app.py lowers it only when asked
   (`--serving-nice`).

What each trap cost on the bench machine: docs/performance.md.
"""

import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

SPIN_COUNT = 3000  # spins of an idle OpenMP worker before it sleeps (libgomp's default 300,000)
OWN_SETTINGS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")  # set by the user: theirs are kept


def load_torch() -> None:
    """Import torch with GOMP_SPINCOUNT=SPIN_COUNT in the environment, then unset it again.
    Does nothing if torch is already loaded (too late) or the user set either OWN_SETTINGS."""
    if "torch" in sys.modules or any(name in os.environ for name in OWN_SETTINGS):
        return
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
    try:
        import torch  # noqa: F401 - libgomp reads the setting as torch loads it
    finally:
        del os.environ["GOMP_SPINCOUNT"]


load_torch()


def lower_priority(nice: int) -> bool:
    """Run the calling thread, and the threads it starts from now on, at nice value `nice`
    (Linux, where a nice value is a thread's own). A nice value already above `nice` is kept:
    lowering one needs privileges. Whether it did: False where threads have no nice value of
    their own."""
    if isinstance(nice, bool) or not isinstance(nice, int) or not 0 <= nice <= 19:
        raise ValueError(f"nice must be an int from 0 to 19, got {nice!r}")
    if not sys.platform.startswith("linux"):
        return False
    tid = threading.get_native_id()
    os.setpriority(os.PRIO_PROCESS, tid, max(nice, os.getpriority(os.PRIO_PROCESS, tid)))
    return True


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
