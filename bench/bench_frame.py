"""What one frame of the live board costs to build, once for every viewer (bench/RESULTS.md).

    .venv/bin/python bench/bench_frame.py [--preset kv_pressure] [--seconds 20]

Runs a preset on the real default model through the driver (its own workload and knobs, the
board's default pace) and builds the frame of every new BoardState as the stream's feed does
(playground/board/frames.py), timing its two parts: the board event (stat tiles, cards, log,
scoreboard, stop reasons, the lesson's panel for every guess: `board`) and the charts
(chart_values + compare_values, at most every CHART_INTERVAL_S: `charts`). Prints the median
and p95 of each, in ms of this thread's CPU time (the wall time also counts the waits for the
GIL while the driver thread steps), and the frames and chart builds counted.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import EngineConfig, LLMEngine  # noqa: E402
from engine.loader import load_model  # noqa: E402
from playground.board.frames import FrameBuilder  # noqa: E402
from playground.driver import EngineDriver  # noqa: E402
from playground.workload.scenarios import SCENARIOS  # noqa: E402


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(len(values) * q))]


def measure(driver: EngineDriver, seconds: float) -> tuple[list[float], list[float]]:
    """(board ms, charts ms) of each frame built while the preset runs for `seconds`."""
    builder, board_ms, chart_ms, seen = FrameBuilder(), [], [], None
    real_charts = builder._chart_events

    def timed_charts(state):
        t0 = time.thread_time()
        out = real_charts(state)
        chart_ms.append(1000 * (time.thread_time() - t0))
        return out

    builder._chart_events = timed_charts
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        state = driver.state()
        if state.version != seen:
            seen, before = state.version, len(chart_ms)
            t0 = time.thread_time()
            builder.build(state)
            total = 1000 * (time.thread_time() - t0)
            board_ms.append(total - (chart_ms[-1] if len(chart_ms) > before else 0.0))
        time.sleep(0.25)  # the feed's FRAME_INTERVAL_S
    return board_ms, chart_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="kv_pressure", choices=sorted(SCENARIOS))
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    model, tokenizer = load_model("default")
    driver = EngineDriver(LLMEngine(model, tokenizer, EngineConfig()))
    try:
        sc = SCENARIOS[args.preset]
        sc.start(driver, sc.engine_config(driver.base_config))
        driver.resume()
        board_ms, chart_ms = measure(driver, args.seconds)
    finally:
        driver.stop()
    print(f"{args.preset}: {len(board_ms)} frames, board median {statistics.median(board_ms):.2f}"
          f" ms p95 {pct(board_ms, 0.95):.2f} ms; {len(chart_ms)} chart builds, median "
          f"{statistics.median(chart_ms):.2f} ms p95 {pct(chart_ms, 0.95):.2f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
