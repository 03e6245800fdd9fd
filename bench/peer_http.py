"""One system's OpenAI-compatible server under load, for bench/bench_vllm.py.

Starts the server in a process of its own, waits until its health route answers, warms it up
with one short request, then sends every request of the workload at once from the official
`openai` client: streamed `/v1/completions` with the prompt as token ids, greedy, `max_tokens`
and `ignore_eos` (vLLM's extension, which both servers take). Client side, per request: the
time to the first chunk that carries a choice (TTFT, as vLLM's own serving benchmark counts
it) and the `usage.completion_tokens` of the last chunk; for the whole load, the CPU time the
client itself took (it runs on the same cores as the server) and the server's processes took.
With `--client-idle` the client runs at SCHED_IDLE: it takes only the CPU the server leaves
and never pre-empts the server's threads.
"""

import asyncio
import os
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from openai import AsyncOpenAI

from bench.peer_worker import group_cpu_s, group_processes, wait_for_quiet

ROOT = Path(__file__).resolve().parent.parent
WARMUP_TOKENS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(proc: subprocess.Popen, url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before it was ready")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} not ready in {timeout_s:.0f} s")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)


async def stream_one(client: AsyncOpenAI, model: str, prompt: list[int], max_tokens: int):
    """(sent, first chunk, end, completion tokens) of one streamed completion."""
    sent = time.perf_counter()
    first, count = None, None
    stream = await client.completions.create(
        model=model, prompt=prompt, max_tokens=max_tokens, temperature=0.0, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )  # fmt: skip
    async for chunk in stream:
        if chunk.choices and first is None:
            first = time.perf_counter()
        if chunk.usage is not None:
            count = chunk.usage.completion_tokens
    return sent, first, time.perf_counter(), count


async def load(base_url: str, workload, max_load: float, quiet_cap_s: float, server: int) -> dict:
    """`workload` through the server at `base_url` (process group `server`), timed."""
    client = AsyncOpenAI(base_url=base_url, api_key="unused", timeout=3600, max_retries=0)
    async with client:
        model = (await client.models.list()).data[0].id
        await stream_one(client, model, workload[0][0][:8], WARMUP_TOKENS)  # warm-up
        load_before = wait_for_quiet(max_load, quiet_cap_s)
        server_start, client_start = group_cpu_s(server), time.thread_time()  # client: this thread
        start = time.perf_counter()
        rows = await asyncio.gather(*(stream_one(client, model, p, m) for p, m in workload))
        client_cpu = time.thread_time() - client_start
        server_cpu = group_cpu_s(server) - server_start
    wall = max(end for _, _, end, _ in rows) - start
    counts = [count for *_, count in rows]
    return {
        "served_model": model,
        "wall_s": wall,
        "tokens_per_s": sum(c or 0 for c in counts) / wall,
        "ttfts": [first - sent for sent, first, _, _ in rows if first is not None],
        "token_counts": counts,
        "load_before": load_before,
        "client_cpu_s": client_cpu,
        "server_cpu_s": server_cpu,
    }


def run_server(
    command: list[str], health_route: str, port: int, workload, args, log_path: Path, env=None
) -> dict:
    """Start `command` (a server listening on `port`), time it to ready, load it, stop it."""
    base = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log:
        start = time.time()
        proc = subprocess.Popen(
            command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,  # its own process group: stopping it stops its children
        )  # fmt: skip
        try:
            wait_ready(proc, base + health_route, args.ready_timeout)
            ready_s = time.time() - start
            result = on_client_thread(
                lambda: asyncio.run(
                    load(base + "/v1", workload, args.max_load, args.quiet_cap, proc.pid)
                ),
                idle=args.client_idle,
            )
        finally:
            stop(proc)
    result["ready_s"] = ready_s
    return result


def on_client_thread(fn, idle: bool):
    """`fn()` on a thread of its own, at SCHED_IDLE if `idle` (it then never pre-empts the
    server's threads). The caller's thread keeps its policy: the processes it starts later,
    the next systems under test, inherit it."""

    def call():
        if idle:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return fn()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result()


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group of `proc` (started in a session of its own) unless it has
    ended, then wait until every process of the group has ended."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wait_for_group(proc.pid)


def wait_for_group(pgid: int, timeout_s: float = 60.0) -> None:
    """Return once no process of group `pgid` runs (SIGKILL after `timeout_s`). A vLLM
    worker outlives its parent by a second or more and computes meanwhile: the next run,
    started at once, would share the cores with it (measured: 1.5 s at 75 % of a core after
    its API server had exited)."""
    deadline = time.monotonic() + timeout_s
    while group_members(pgid):
        if time.monotonic() > deadline:
            os.killpg(pgid, signal.SIGKILL)
            deadline = float("inf")
        time.sleep(0.1)


def group_members(pgid: int) -> list[int]:
    """The pids of group `pgid` that have not ended (a zombie has: only its exit status waits
    for its parent, which may be a PID 1 that never reaps)."""
    return [pid for pid, fields in group_processes(pgid) if fields[0] != "Z"]
