"""End to end: `python app.py --serving-nice 19` lowers the threads that serve the page and the
API once the driver thread has started, and leaves the driver and its OpenMP team at 0."""

import contextlib
import json
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.conftest import SERVER_ARGS as DEFAULT_ARGS

pytestmark = pytest.mark.e2e
SERVER_ARGS = [*DEFAULT_ARGS, "--serving-nice", "19"]


def _threads(pid: int) -> dict[int, tuple[int, int]]:
    """tid -> (CPU time in clock ticks, nice value) of each thread of process `pid`."""
    found = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            stat = (task / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()  # proc(5)'s fields 3 on
            found[int(task.name)] = (int(fields[11]) + int(fields[12]), int(fields[16]))
    return found


def test_the_serving_threads_step_aside_for_the_engine(server):
    """The event loop (the main thread) runs at the serving nice value; the thread that
    computes an API request's tokens (the driver or one of its OpenMP workers, which the
    driver started before the event loop stepped aside) at 0."""
    before = _threads(server.pid)
    body = {"model": "default", "prompt": "The sea", "max_tokens": 64, "ignore_eos": True}
    request = urllib.request.Request(server + "/v1/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(request, timeout=120) as r:
        assert json.loads(r.read())["usage"]["completion_tokens"] == 64
    after = _threads(server.pid)
    assert after[server.pid][1] == 19, after
    busiest = max(after, key=lambda tid: after[tid][0] - before.get(tid, (0, 0))[0])
    assert busiest != server.pid and after[busiest][1] == 0, (before, after)
