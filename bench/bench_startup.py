"""Startup benchmark: `python app.py` to the first streamed token, with the model cached.

Starts the app on a free 127.0.0.1 port --runs times; each time measures seconds from the
process start until /health answers (ready) and until the first token of a streamed chat
completion arrives (first token). Medians. The first start on a machine also converts the
bundled GGUF (~30 s, once); run this once before to time the cached path.

    python bench/bench_startup.py
"""

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_start(timeout: float) -> tuple[float, float]:
    """(ready s, first token s) from the process start."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "app.py", "--port", str(port)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"app.py exited with {proc.returncode}")
            if time.perf_counter() - start > timeout:
                raise TimeoutError(f"app.py not ready in {timeout} s")
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        ready = time.perf_counter() - start
        body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": True}
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["delta"].get(
                    "content"
                ):
                    return ready, time.perf_counter() - start
        raise RuntimeError("the stream ended without a token")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    ready, first = [], []
    for i in range(args.runs):
        r, f = one_start(args.timeout)
        ready.append(r)
        first.append(f)
        print(f"run {i + 1}: ready {r:.2f} s, first token {f:.2f} s", flush=True)
    print(
        f"app.py start -> ready {statistics.median(ready):.2f} s, -> first token "
        f"{statistics.median(first):.2f} s (median of {args.runs})"
    )


if __name__ == "__main__":
    main()
