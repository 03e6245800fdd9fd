"""Measure what the board costs the engine (a script, not a test; pytest does not collect it).

    .venv/bin/python tests/e2e/measure_board.py [--rounds 2] [--repeats 2] [--clients 3]

Serves the real app in-process on a free port and runs the same fixed workload (16 greedy
requests of 32 tokens, ignore_eos, `--rounds` times) three ways, alternating `--repeats`
times so load from elsewhere hits all alike:
  headless   nobody watches;
  polled     `--clients` sessions ask for the board over HTTP as the page's gr.Timer does, 4
             times a second or as rarely as the server's answer says (the server's whole share
             of an open page, the browser elsewhere);
  chromium   Debian's chromium shows the board on this same machine (its rendering competes
             with the engine for the same cores).
Prints generated tokens per second of wall time, each mode against headless, and what a
timer tick cost: board_values (HTML + chart JSON) and the HTTP round trips (tick + chart redraw).
"""

import argparse
import json
import socket
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import app  # noqa: E402
import playground.ui  # noqa: E402
from engine import LLMEngine, SamplingParams  # noqa: E402
from engine.cpu.openmp import lower_priority  # noqa: E402
from playground.driver import EngineDriver  # noqa: E402
from playground.ui import callbacks  # noqa: E402

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip
TICK_S = 0.25
BOARD_COSTS: list[float] = []  # seconds in board_values (the text), per tick that drew it
CHART_COSTS: list[float] = []  # seconds in chart_values (the chart JSON), per chart redraw


def _timed(real, costs: list[float]):
    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        out = real(*args, **kwargs)
        costs.append(time.perf_counter() - t0)
        return out

    return timed


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


class Pollers:
    """`n` sessions that do what an open page does: the timer's tick every TICK_S (it brings
    the text) and, when it says the charts are due, the chart redraw that follows."""

    def __init__(self, url: str, fns: dict[str, tuple[int, int]], n: int):
        self.url = url  # fns: name -> (fn_index, trigger_id)
        self.tick, self.charts = fns["tick"], fns["charts"]
        self.stop = threading.Event()
        self.round_trips: list[float] = []  # tick + redraw, as the page waits for both
        self.threads = [threading.Thread(target=self._poll, args=(i,)) for i in range(n)]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()

    def _post(self, session: str, fn: tuple[int, int], data: list):
        body = json.dumps({"data": data, "fn_index": fn[0], "session_hash": session,
                           "event_data": None, "trigger_id": fn[1]}).encode()  # fmt: skip
        req = urllib.request.Request(self.url + "/gradio_api/run/predict", data=body,
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())["data"]

    def _poll(self, i: int) -> None:
        session, seen, charts_seen = f"poller{i}-{time.time_ns()}", -1, -1
        charts_at, every = None, TICK_S  # as the page keeps them: last chart redraw, timer
        while not self.stop.is_set():
            t0 = time.perf_counter()
            inputs = [seen, charts_seen, charts_at, None, every, "", "", None]  # role, banner, live
            text, charts, _, at, interval, *_ = self._post(session, self.tick, inputs)
            if isinstance(text, int | float):
                seen = text
            if isinstance(charts, int | float):  # what chart_version's change event does
                charts_seen, charts_at = charts, at
                self._post(session, self.charts, [charts, None, None])
            if isinstance(interval, int | float):  # the server slows the timer for a crowd
                every = interval
            self.round_trips.append(time.perf_counter() - t0)
            self.stop.wait(every)


def _ms(values: list[float], q: float) -> str:
    return f"{sorted(values)[int(len(values) * q)] * 1000:.1f} ms" if values else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--clients", type=int, default=3)
    ap.add_argument("--serving-nice", type=int, default=0,
                    help="the server thread's nice, as app.py's flag sets it")  # fmt: skip
    args = ap.parse_args()
    callbacks.board_values = _timed(callbacks.board_values, BOARD_COSTS)
    callbacks.chart_values = _timed(callbacks.chart_values, CHART_COSTS)
    built = {}
    real_build = playground.ui.build_ui  # create_app imports it when called
    playground.ui.build_ui = lambda d, seat=None: built.setdefault("demo", real_build(d, seat))
    engine = LLMEngine.from_pretrained("default", num_kv_blocks=512, max_num_seqs=16)
    driver = EngineDriver(engine)
    fastapi_app = app.create_app(driver)
    demo = built["demo"]
    fns = {f.name: (i, f.targets[0][0]) for i, f in demo.fns.items() if f.targets}
    fns = {"tick": fns["tick"], "charts": fns["redraw_charts"]}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    server = uvicorn.Server(uvicorn.Config(fastapi_app, port=port, log_level="error"))

    def serve():  # as app.main() serves: the event loop below the driver thread
        lower_priority(args.serving_nice)
        server.run()

    threading.Thread(target=serve, daemon=True).start()
    while not server.started:
        time.sleep(0.1)
    run_workload(driver, 1)  # warm-up
    from playwright.sync_api import sync_playwright

    results = {"headless": [], "polled": [], "chromium": []}
    polled_costs, chart_costs, trips, page_costs = [], [], [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        for _ in range(args.repeats):
            results["headless"].append(run_workload(driver, args.rounds))
            BOARD_COSTS.clear()
            CHART_COSTS.clear()
            with Pollers(url, fns, args.clients) as pollers:
                results["polled"].append(run_workload(driver, args.rounds))
            polled_costs += BOARD_COSTS
            chart_costs += CHART_COSTS
            trips += pollers.round_trips
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(url)
            page.wait_for_selector("#pg-board .pg-cards")
            BOARD_COSTS.clear()
            results["chromium"].append(run_workload(driver, args.rounds))
            page_costs += BOARD_COSTS
            page.close()
        browser.close()
    base = statistics.mean(results["headless"])
    for name, values in results.items():
        ratio = statistics.mean(values) / base
        print(f"{name:9s} tokens/s: {', '.join(f'{v:.1f}' for v in values):24s} "
              f"mean {statistics.mean(values):.1f} = {ratio:.0%} of headless")  # fmt: skip
    print(f"polled ({args.clients} sessions): text (board_values) median "
          f"{_ms(polled_costs, 0.5)}, p95 {_ms(polled_costs, 0.95)}; charts (chart_values) "
          f"median {_ms(chart_costs, 0.5)}, p95 {_ms(chart_costs, 0.95)}; HTTP round trips "
          f"median {_ms(trips, 0.5)}, p95 {_ms(trips, 0.95)}; {len(trips)} ticks")  # fmt: skip
    print(f"chromium: {len(page_costs)} ticks drew something, board_values median "
          f"{_ms(page_costs, 0.5)}")  # fmt: skip
    server.should_exit = True
    driver.stop()


if __name__ == "__main__":
    main()
