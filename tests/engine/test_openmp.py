"""engine/cpu/openmp.py: a load leaves the caller's thread without an OpenMP team, torch loads
with a short spin of idle workers, and a thread can step aside for the team.

A thread's team is seen by name: Linux threads take their creator's name, so the workers
libgomp starts for a thread named PROBE are named PROBE too.
"""

import ctypes
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from bench.random_models import random_model, word_tokenizer
from engine import LLMEngine, SamplingParams
from engine.cpu.openmp import OWN_SETTINGS, SPIN_COUNT, lower_priority, off_thread

ROOT = Path(__file__).resolve().parents[2]

PROBE = b"omp-probe"
TEAM_WORKERS = torch.get_num_threads() - 1  # a team is the calling thread and these


def parallel_op() -> None:
    torch.ones(1 << 22).add_(1)  # far over ATen's grain size: one parallel region


def probe_threads() -> int:
    """Threads named PROBE, the calling one left out."""
    me, count = threading.get_native_id(), 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm", "rb") as f:
                named = f.read().strip() == PROBE
        except FileNotFoundError:  # ended meanwhile
            continue
        count += named and int(tid) != me
    return count


def workers_left_by(fn) -> int:
    """The PROBE workers still alive after `fn` ran on a fresh thread named PROBE (the
    workers of threads that `fn` started and that ended get 5 s to go)."""
    seen: list[int] = []

    def probe():
        ctypes.CDLL(None).prctl(15, PROBE, 0, 0, 0)  # PR_SET_NAME
        fn()
        deadline = time.monotonic() + 5
        while probe_threads() and time.monotonic() < deadline:
            time.sleep(0.05)
        seen.append(probe_threads())

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return seen[0]


def test_a_parallel_op_leaves_its_thread_a_team():
    """The premise: a thread that ran a parallel op keeps its workers while it lives."""
    assert workers_left_by(parallel_op) == TEAM_WORKERS


def test_off_thread_leaves_no_team_behind():
    assert workers_left_by(lambda: off_thread(parallel_op)) == 0


def test_off_thread_returns_the_result_and_raises_the_error():
    assert off_thread(lambda a, b=0: a + b, 2, b=3) == 5
    error = KeyError("x")

    def fail():
        raise error

    with pytest.raises(KeyError) as info:
        off_thread(fail)
    assert info.value is error


def test_from_pretrained_leaves_the_caller_no_team(tmp_path):
    """A server loads on its main thread and steps on a driver thread: the load must not
    leave the main thread a team (libgomp would then make every step wait for its workers)."""
    random_model("tiny", "cpu", torch.float32).save_pretrained(tmp_path)
    word_tokenizer(49152).save_pretrained(tmp_path)
    engines = []
    left = workers_left_by(
        lambda: engines.append(LLMEngine.from_pretrained(str(tmp_path), num_kv_blocks=4096))
    )
    assert left == 0
    (out,) = engines[0].generate([[5, 6, 7]], SamplingParams(max_tokens=3, ignore_eos=True))
    assert len(out.token_ids) == 3


SPY = """
import os, sys
seen = []
class Spy:  # sees torch's first import, the moment libgomp reads its settings
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.append(os.environ.get("GOMP_SPINCOUNT"))
sys.meta_path.insert(0, Spy())
import engine
print(seen[0], os.environ.get("GOMP_SPINCOUNT"))
"""


CASES = [
    ({}, f"{SPIN_COUNT} None"),  # set while torch loads, then gone (children do not inherit)
    ({"GOMP_SPINCOUNT": "50"}, "50 50"),  # the user's own
    ({"OMP_WAIT_POLICY": "PASSIVE"}, "None None"),  # the user's policy: no spin count added
]


def test_importing_the_engine_loads_torch_with_a_short_spin():
    """Each case in a fresh interpreter, the three at once (each import is one core's work)."""
    base = {k: v for k, v in os.environ.items() if k not in OWN_SETTINGS}
    procs = [subprocess.Popen([sys.executable, "-c", SPY], env={**base, **env}, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for env, _ in CASES]  # fmt: skip
    for proc, (env, expected) in zip(procs, CASES, strict=True):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0 and out.split("\n")[-2] == expected, (env, out, err)


def nice_of(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


def test_lower_priority_sets_the_calling_thread_and_those_it_starts():
    mine = nice_of(threading.get_native_id())

    def serving():
        assert lower_priority(7) is True
        started_after = off_thread(lambda: nice_of(threading.get_native_id()))
        return nice_of(threading.get_native_id()), started_after

    assert off_thread(serving) == (max(mine, 7), max(mine, 7))
    assert nice_of(threading.get_native_id()) == mine  # the caller of the thread: untouched


def test_lower_priority_never_raises_a_priority():
    def twice():
        lower_priority(12)
        lower_priority(3)  # would need privileges: left at 12
        return nice_of(threading.get_native_id())

    assert off_thread(twice) == max(12, nice_of(threading.get_native_id()))


@pytest.mark.parametrize("bad", [-1, 20, True, 2.5, "5"])
def test_lower_priority_refuses_what_is_no_nice_value(bad):
    with pytest.raises(ValueError, match="nice"):
        lower_priority(bad)
