"""What a crowd watching the board costs the engine (`make bench-viewers`).

    .venv/bin/python bench/bench_viewers.py [--viewers 1,10,30,100,300] [--repeats 1]
        [--before DIR] [--out bench/out/viewers.md] [--output-json FILE]

Starts the real app (`python app.py`, the default model, the control seat on: --controls
seat) of this checkout on a free 127.0.0.1 port and runs one fixed workload (16 greedy requests of
128 tokens, ignore_eos, over /v1/completions) headless and watched by N simulated viewers and
the seat's holder (bench/viewers.py: asyncio in this process, one connection each, so their
CPU is this process's and is reported apart), alternating headless and watched rounds. Per N:
the engine's tokens/s watched against headless; updates per second per viewer (median, and
the slowest 5 %); the gap between a viewer's updates and, streamed, an update's age when it
arrives, since the engine's driver published the BoardState it shows (p50 / p95); the seat's
updates per second, ticks per second (the full rate is 4) and tick round trip (p50 / p95);
the server's extra CPU per viewer-update (its process CPU in the watched rounds less the
headless ones, per update delivered); this process's CPU.
An update is a new board version: a viewer can get no more than the engine's steps publish
("board versions/s", the distinct versions any viewer got).
--before DIR (a checkout from before the stream, e.g. `git worktree add /tmp/before e47f202`)
also measures the board as it was there (viewers polling with Gradio events), the same way.
The table is printed and written to --out; --output-json keeps every round's numbers (and the
ages since a frame was built).
"""

import argparse
import asyncio
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from viewers import Crowd, GradioFns, Viewer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# 16 API requests from one host; the seat's holder keeps it through every round
SERVER_ARGS = ["--max-num-seqs", "16", "--limit-in-flight", "32", "--controls", "seat",
               "--seat-idle", "3600"]  # fmt: skip
NUM_REQUESTS, MAX_TOKENS = 16, 128  # a round of several seconds: a run a class watches
WARM_S = 1.0  # after every viewer has joined, this long before the watched round starts
JOIN_TIMEOUT_S = 120.0  # for the whole crowd to join, and JOIN_S_PER_VIEWER more per viewer
JOIN_S_PER_VIEWER = 0.2
FDS_PER_VIEWER = 2  # its stream's socket here and the server's end of it (one process tree)
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def raise_fd_limit(max_viewers: int) -> None:
    """Lets this process and the server it starts (which inherits the limit) hold a socket
    per viewer: the soft RLIMIT_NOFILE raised as far as needed, within the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = FDS_PER_VIEWER * max_viewers + 512  # and the app's own files, the tick pool
    if hard != resource.RLIM_INFINITY and need > hard:
        raise SystemExit(f"{max_viewers} viewers need {need} open files; the hard limit is "
                         f"{hard} (ulimit -Hn)")  # fmt: skip
    if soft != resource.RLIM_INFINITY and need > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def start_server(root: Path, port: int, log_path: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "SPACE_ID"}
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port), *SERVER_ARGS],
                                cwd=root, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=log,
                                stderr=subprocess.STDOUT)  # fmt: skip
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the app exited: {log_path.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the app did not answer /health in time")


def stop_server(proc: subprocess.Popen) -> None:
    """Ctrl-C, as a person stops the app; killed if it has not stopped within a minute."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


async def workload(api: httpx.AsyncClient, model: str, tag: str) -> tuple[float, float, float]:
    """(tokens per second of wall time, start, end) of one wave of NUM_REQUESTS requests."""
    body = dict(model=model, max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)

    async def one(i: int) -> int:
        r = await api.post("/v1/completions", json={**body, "prompt": f"{tag}, user {i}: tell "
                                                    "me about the sea."})  # fmt: skip
        r.raise_for_status()
        return r.json()["usage"]["completion_tokens"]

    t0 = time.time()
    tokens = sum(await asyncio.gather(*(one(i) for i in range(NUM_REQUESTS))))
    t1 = time.time()
    return tokens / (t1 - t0), t0, t1


def pct(values: list[float], q: float) -> float | None:
    return sorted(values)[min(len(values) - 1, int(len(values) * q))] if values else None


def crowd_numbers(crowd: Crowd, t0: float, t1: float) -> dict:
    """Per viewer, inside the watched round [t0, t1]: updates/s, gaps, ages, bytes."""
    rates, gaps, ages, built, num_updates, versions = [], [], [], [], 0, set()
    for v in crowd.viewers:
        times = [t for t in v.updates if t0 <= t <= t1]
        versions.update(n for t, n in zip(v.updates, v.versions, strict=True) if t0 <= t <= t1)
        num_updates += len(times)
        rates.append(len(times) / (t1 - t0))
        gaps += [b - a for a, b in zip([t0, *times], [*times, t1], strict=True)]
        ages += [a for t, a in zip(v.updates, v.published_ages, strict=False) if t0 <= t <= t1]
        built += [a for t, a in zip(v.updates, v.ages, strict=False) if t0 <= t <= t1]
    return {"updates_per_s_p50": pct(rates, 0.5), "updates_per_s_p5": pct(rates, 0.05),
            "gap_p50": pct(gaps, 0.5), "gap_p95": pct(gaps, 0.95),
            "published_age_p50": pct(ages, 0.5), "published_age_p95": pct(ages, 0.95),
            "built_age_p50": pct(built, 0.5), "built_age_p95": pct(built, 0.95),
            "num_updates": num_updates, "versions_per_s": len(versions) / (t1 - t0),
            "bytes_per_viewer": sum(v.num_bytes for v in crowd.viewers) / len(crowd.viewers),
            "reconnects": sum(v.num_reconnects for v in crowd.viewers)}  # fmt: skip


def seat_numbers(seat: Viewer, t0: float, t1: float) -> dict:
    """The seat's holder inside the watched round [t0, t1]: its updates and ticks per second,
    its ticks' round trips."""
    trips = [s for t, s in seat.round_trips if t0 <= t <= t1]
    return {"seat_updates_per_s": sum(t0 <= t <= t1 for t in seat.updates) / (t1 - t0),
            "seat_ticks_per_s": len(trips) / (t1 - t0), "seat_tick_p50": pct(trips, 0.5),
            "seat_tick_p95": pct(trips, 0.95)}  # fmt: skip


async def measure(url: str, pid: int, mode: str, n: int, args, fns: GradioFns) -> dict:
    """Alternating headless and watched rounds for `n` viewers."""
    api = httpx.AsyncClient(base_url=url, timeout=600)
    model = (await api.get("/v1/models")).json()["data"][0]["id"]
    rows = []
    for r in range(args.repeats):
        c0 = cpu_s(pid)
        headless, h0, h1 = await workload(api, model, f"headless {n}.{r}")
        cpu_headless = cpu_s(pid) - c0
        crowd = Crowd(url, fns, mode, n, seat=True)
        t_join = time.monotonic()
        await crowd.start()
        not_joined = await crowd.joined(JOIN_TIMEOUT_S + JOIN_S_PER_VIEWER * n)
        join_s = time.monotonic() - t_join
        if not_joined:
            print(f"{not_joined} of {n} viewers had not joined after {join_s:.0f} s", flush=True)
        await asyncio.sleep(WARM_S)
        c0, p0 = cpu_s(pid), time.process_time()
        watched, t0, t1 = await workload(api, model, f"watched {n}.{r}")
        cpu_watched, own = cpu_s(pid) - c0, time.process_time() - p0
        failed = await crowd.stop()
        if failed:
            print(f"{len(failed)} viewer tasks or leaves failed, the first: {failed[0]!r}",
                  flush=True)  # fmt: skip
        numbers = crowd_numbers(crowd, t0, t1)
        extra = cpu_watched - cpu_headless
        rows.append({"headless": headless, "watched": watched, **numbers,
                     **seat_numbers(crowd.seat, t0, t1),
                     "server_cpu_ms_per_update": 1000 * extra / max(1, numbers["num_updates"]),
                     "viewer_cpu_cores": own / (t1 - t0), "join_s": join_s,
                     "not_joined": not_joined, "failed": len(failed)})  # fmt: skip
        await asyncio.sleep(0.5)
    await api.aclose()
    return summarize(mode, n, rows)


def summarize(mode: str, n: int, rows: list[dict]) -> dict:
    mean = {k: statistics.mean(r[k] for r in rows if r[k] is not None)
            for k in rows[0] if any(r[k] is not None for r in rows)}  # fmt: skip
    return {"mode": mode, "viewers": n, **mean, "ratio": mean["watched"] / mean["headless"],
            "rounds": rows}  # fmt: skip


def table_row(s: dict) -> str:
    def f(key, scale=1.0, fmt="{:.2f}"):
        return fmt.format(s[key] * scale) if s.get(key) is not None else "-"

    return (f"| {s['viewers']} | {s['mode']} | {f('headless', fmt='{:.0f}')} | "
            f"{f('watched', fmt='{:.0f}')} | {f('ratio', 100, '{:.0f} %')} | "
            f"{f('versions_per_s')} | {f('updates_per_s_p50')} / {f('updates_per_s_p5')} | "
            f"{f('gap_p50')} / {f('gap_p95')} | "
            f"{f('published_age_p50')} / {f('published_age_p95')} | "
            f"{f('seat_updates_per_s')} | {f('seat_ticks_per_s')} | "
            f"{f('seat_tick_p50', 1000, '{:.0f}')} / {f('seat_tick_p95', 1000, '{:.0f}')} | "
            f"{f('server_cpu_ms_per_update')} | {f('viewer_cpu_cores')} | "
            f"{f('bytes_per_viewer', 1 / 1024, '{:.0f}')} | "
            f"{f('join_s', fmt='{:.1f}')} |")  # fmt: skip


HEADER = (
    "| viewers | path | headless tok/s | watched tok/s | watched / headless | board versions/s"
    " | updates/s per viewer, p50 / slowest 5 % | gap between updates p50 / p95 (s) | update "
    "age since the engine published it, p50 / p95 (s) | seat's updates/s | seat's ticks/s | "
    "seat's tick round trip p50 / p95 (ms) | server extra CPU per update (ms) | viewers' own "
    "CPU (cores) | KiB per viewer per round | all joined after (s) |\n" + "|---" * 16 + "|"
)


async def run(url: str, pid: int, mode: str, args) -> list[dict]:
    async with httpx.AsyncClient(base_url=url) as http:
        fns = GradioFns.from_config((await http.get("/config")).json(), mode)
    api = httpx.AsyncClient(base_url=url, timeout=600)
    model = (await api.get("/v1/models")).json()["data"][0]["id"]
    await workload(api, model, "warm-up")
    await api.aclose()
    results = []
    for n in args.viewers:
        results.append(await measure(url, pid, mode, n, args, fns))
        print(table_row(results[-1]), flush=True)
    return results


def serve_and_measure(root: Path, mode: str, args) -> list[dict]:
    """The app of checkout `root` on a free port, measured with `mode` viewers, then stopped."""
    port = free_port()
    log_path = Path(f"/tmp/bench-viewers-{port}.log")
    proc = start_server(root.resolve(), port, log_path)
    try:
        return asyncio.run(run(f"http://127.0.0.1:{port}", proc.pid, mode, args))
    finally:
        stop_server(proc)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--viewers", default="1,10,30,100,300",
                    type=lambda s: [int(x) for x in s.split(",")])  # fmt: skip
    ap.add_argument("--before", type=Path, default=None,
                    help="a checkout from before the stream, measured too (polling)")  # fmt: skip
    ap.add_argument("--repeats", type=int, default=1, help="headless + watched rounds per N")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "viewers.md")
    ap.add_argument("--output-json", type=Path, default=None)
    args = ap.parse_args()
    raise_fd_limit(max(args.viewers) + 1)  # and the seat
    print(HEADER, flush=True)
    results = serve_and_measure(ROOT, "stream", args)
    if args.before:
        results += serve_and_measure(args.before, "poll", args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join([HEADER, *map(table_row, results)]) + "\n")
    print(f"table written to {args.out}")
    if args.output_json:
        args.output_json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
