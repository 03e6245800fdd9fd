"""What one board update costs the server: the busy clock, the text and the charts.

Runs a preset (default: KV pressure) on the real default model through an EngineDriver at
full pace and keeps the BoardStates it publishes once the run is --warm-steps steps in (a
full step window is the costly case), with the engine snapshots the driver converted to
them. With the driver stopped, it times on them in order (as the board meets them):

  busy       BusyTime.convert of each engine snapshot (what the driver does per publish)
  board      board_values (stats, cards, step log, inspector, scoreboard), per state
  charts     chart_values of one session on a FigureCache (every chart of a new version)
  inspected  chart_values of a session that inspects a request, and that request's block table

Prints the median and p90 over the states of each state's best of --repeat passes, in ms.
--save keeps the run in a pickle and --load times a kept one, so two versions of the code can
be timed on the same states back to back.

    python bench/bench_board.py --save /tmp/kv.pkl && python bench/bench_board.py --load /tmp/kv.pkl
"""

import argparse
import json
import pickle
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/bench_board.py` from the repo root
    sys.path.insert(0, str(ROOT))

from engine import LLMEngine  # noqa: E402
from playground.board.views import FigureCache, board_values, chart_values  # noqa: E402
from playground.driver import EngineDriver, busy  # noqa: E402
from playground.workload.scenarios import SCENARIOS  # noqa: E402

RAW: list = []  # the engine snapshots the driver converted, in order


def _keep_raw():
    real = busy.BusyTime.convert

    def convert(self, snap):
        RAW.append(snap)
        return real(self, snap)

    busy.BusyTime.convert = convert


def collect(preset: str, num_states: int, warm_steps: int, limit_s: float):
    """(BoardStates, engine snapshots) of the preset once it ran `warm_steps` steps."""
    engine = LLMEngine.from_pretrained("default", num_kv_blocks=1024)
    driver = EngineDriver(engine, pace="max")
    sc = SCENARIOS[preset]
    sc.start(driver, sc.engine_config(driver.base_config))
    _keep_raw()
    driver.resume()
    states, deadline = {}, time.monotonic() + limit_s
    while len(states) < num_states and time.monotonic() < deadline:
        state = driver.state()
        if state.snapshot.step < warm_steps:
            RAW.clear()
        else:
            states.setdefault(state.version, state)
        time.sleep(0.002)
    driver.stop()
    return list(states.values()), list(RAW)


def time_each(states, make_fn, repeat: int) -> list[float]:
    """Per state, the least seconds of `repeat` passes over all states in order, each pass
    with a fresh `make_fn()` (a new cache, a new clock): a shared machine's spikes drop out."""
    best = [float("inf")] * len(states)
    for _ in range(repeat):
        fn = make_fn()
        for i, state in enumerate(states):
            t0 = time.perf_counter()
            fn(state)
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def _charts(rid_of):
    """One session's chart update of a new version, plus the block table of the request it
    inspects (FigureCache.block_table, as playground/ui/live.py asks for it)."""
    cache = FigureCache()

    def update(state):
        chart_values(state, cache, {})
        if (rid := rid_of(state)) is not None:
            cache.block_table(state, rid)

    return update


def inspected(state) -> str | None:
    """A request that holds KV blocks (what a visitor would inspect), if any."""
    held = [r.request_id for r in state.snapshot.requests if r.block_table]
    return held[0] if held else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="kv_pressure", choices=sorted(SCENARIOS))
    ap.add_argument("--states", type=int, default=100, help="board states to keep")
    ap.add_argument("--warm-steps", type=int, default=512, help="steps run before keeping")
    ap.add_argument("--limit-s", type=float, default=900.0, help="longest run of the preset")
    ap.add_argument("--save", help="keep the run's states and snapshots in this pickle")
    ap.add_argument("--load", help="time the states and snapshots of a kept run")
    ap.add_argument("--repeat", type=int, default=5, help="passes; each state's best counts")
    ap.add_argument("--output-json", help="write the results here")
    args = ap.parse_args()
    if args.load:
        states, raw = pickle.loads(Path(args.load).read_bytes())
    else:
        states, raw = collect(args.preset, args.states, args.warm_steps, args.limit_s)
    if args.save:
        Path(args.save).write_bytes(pickle.dumps((states, raw)))
    n = args.repeat
    parts = {
        "busy": time_each(raw, lambda: busy.BusyTime().convert, n),
        "board": time_each(states, lambda: lambda s: board_values(s, None, None, ()), n),
        "charts": time_each(states, lambda: _charts(lambda s: None), n),
        "inspected": time_each(states, lambda: _charts(inspected), n),
    }
    steps = [s.snapshot.step for s in states]
    print(f"{len(states)} board states, steps {min(steps)}-{max(steps)}, {len(raw)} snapshots")
    results = {}
    for name, costs in parts.items():
        ms = sorted(c * 1000 for c in costs)
        p50, p90 = statistics.median(ms), ms[int(0.9 * (len(ms) - 1))]
        results[name] = {"median_ms": round(p50, 3), "p90_ms": round(p90, 3), "n": len(ms)}
        print(f"{name:9s} median {p50:6.2f} ms   p90 {p90:6.2f} ms   (n={len(ms)})")
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
