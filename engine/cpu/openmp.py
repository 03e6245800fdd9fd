"""The engine's CPU threads, and a trap in how libgomp treats them.

torch's CPU kernels run on OpenMP (libgomp). Each thread that runs a parallel op keeps a team
of worker threads for as long as it lives. Once the process holds more of those threads than
it has cores, libgomp stops letting idle workers spin between ops: they sleep, and every op
of the forward then waits for its workers to wake. A server that loads the model on its main
thread and steps it on another holds two teams. On 2 cores the bench workload ran at 196
tok/s in bfloat16 that way, against 243 tok/s when one thread both loaded and stepped.

`off_thread` runs a call on a short-lived thread, whose team ends with it, so that the thread
that steps the engine is the only one that keeps a team.

The other trap is the opposite one. By default an idle worker spins 300,000 times before it
sleeps. On a machine that also runs anything else (the browser on a laptop, the HTTP clients,
the event loop), the worker that spins holds a core the late one needs, and every op waits a
time slice: 32 requests x 48 tokens ran at 72 tok/s (fp32, 2 cores) beside one busy process,
against 280 tok/s alone. `load_torch` loads torch (and so libgomp, which reads its settings
once, then) with GOMP_SPINCOUNT=3000: 125 tok/s beside the busy process; alone, 176-304
against the default's 215-285 (this machine's noise is larger than the difference). The
process environment is left as it was, so programs it starts (a peer under benchmark) do not
inherit the setting. Importing this module calls it: `engine/__init__.py` imports it first.

The third trap is a thread of the same process at the same priority: a server's event loop,
woken to stream a step's tokens, pre-empts one thread of the team mid-op while the other
waits at the op's barrier, so its CPU time is paid about twice. On 2 cores, bf16, the bench
workload's 64 streams read by a client that costs almost no CPU: a decode step of 64
sequences took 89 ms, against 71-73 ms when the server streamed nothing; with the event loop
at nice 19 (`lower_priority`) 73-77 ms, and the run 3.9 % faster (median of three). At a
higher nice it runs on the cores the team leaves idle (the Python between ops), and answers
later: the board's ticks took p95 236-325 ms at nice 19 against 62-72 ms at 0, with no
throughput gained. So app.py lowers it only when asked (`--serving-nice`).
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
