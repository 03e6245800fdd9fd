"""Measure what the board costs the engine (a script, not a test; pytest does not collect it).

    .venv/bin/python tests/e2e/measure_board.py [--rounds 2] [--repeats 2]

Serves the real app in-process on a free port, then runs the same fixed workload (16
greedy requests of 32 tokens, ignore_eos, `--rounds` times) with no browser ("headless") and
with Debian's chromium showing the board ("page open"), alternating `--repeats` times so load
from elsewhere hits both alike. Prints generated tokens per second of wall time for each,
their ratio, and what each timer tick cost the server (board_values: HTML + chart JSON).
"""

import argparse
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import app  # noqa: E402
from engine import LLMEngine, SamplingParams  # noqa: E402
from playground import ui  # noqa: E402
from playground.driver import EngineDriver  # noqa: E402

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip
TICK_COSTS: list[float] = []


def _timed_board_values(real):
    def board_values(*args, **kwargs):
        t0 = time.perf_counter()
        out = real(*args, **kwargs)
        TICK_COSTS.append(time.perf_counter() - t0)
        return out

    return board_values


def run_workload(driver: EngineDriver, rounds: int) -> float:
    """Generated tokens per second of wall time for `rounds` waves of 16 requests."""
    params = SamplingParams(max_tokens=32, temperature=0.0, ignore_eos=True)
    t0, tokens = time.monotonic(), 0
    for r in range(rounds):
        handles = [
            driver.submit(f"Round {r}, user {i}: tell me about the sea.", params, owner="bench")
            for i in range(16)
        ]
        tokens += sum(len(h.result(timeout=600).token_ids) for h in handles)
    return tokens / (time.monotonic() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    ui.board_values = _timed_board_values(ui.board_values)
    engine = LLMEngine.from_pretrained("default", num_kv_blocks=512, max_num_seqs=16)
    driver = EngineDriver(engine)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app.create_app(driver), port=port, log_level="error"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.1)
    run_workload(driver, 1)  # warm-up
    from playwright.sync_api import sync_playwright

    results = {"headless": [], "page open": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        for _ in range(args.repeats):
            results["headless"].append(run_workload(driver, args.rounds))
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}")
            page.wait_for_selector("#pg-board .pg-cards")
            TICK_COSTS.clear()
            results["page open"].append(run_workload(driver, args.rounds))
            ticks = list(TICK_COSTS)
            page.close()
        browser.close()
    for name, values in results.items():
        print(f"{name:10s} tokens/s: " + ", ".join(f"{v:.1f}" for v in values))
    ratio = statistics.mean(results["page open"]) / statistics.mean(results["headless"])
    print(f"page open / headless: {ratio:.0%}")
    if ticks:
        ticks.sort()
        print(f"server cost per tick (last page run, {len(ticks)} ticks): "
              f"median {ticks[len(ticks) // 2] * 1000:.1f} ms, "
              f"p95 {ticks[int(len(ticks) * 0.95)] * 1000:.1f} ms")  # fmt: skip
    server.should_exit = True
    driver.stop()


if __name__ == "__main__":
    main()
