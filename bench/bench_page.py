"""What the live board costs the browser that shows it (`make bench-page`).

    .venv/bin/python bench/bench_page.py [--root DIR] [--preset "Chat burst"] [--seconds 10]
        [--repeats 3] [--output-json FILE]

Starts the real app (`python app.py`, the default model) from --root on a free 127.0.0.1 port,
opens it in Debian's chromium (1440x900, headless), starts a preset (its first answer) and,
once its charts are drawn, reads the renderer's own counters over --seconds (Chrome DevTools'
Performance.getMetrics): the main thread's busy time (TaskDuration) split into script, style
recalculation and layout, and the number of layouts; then how long 20 reads of the page's boxes
take (what a test or a pointer waits for while the renderer is busy) and how many Plotly redraws
ran and their mean time. The server and the browser share this machine's cores, as on a laptop
that runs both. --root: a checkout to measure instead of this one (e.g. one from before a change).
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]

from bench_viewers import free_port, start_server, stop_server  # noqa: E402

from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS  # noqa: E402  (how chromium runs here)

METRICS = ("TaskDuration", "ScriptDuration", "RecalcStyleDuration", "LayoutDuration",
           "LayoutCount")  # fmt: skip
# Every Plotly.react, timed: how many the page drew and what each cost.
TIME_REDRAWS = """() => { const react = window.Plotly.react; window.pgRedraws = [];
    window.Plotly.react = function (...args) { const t = performance.now();
        const out = react.apply(this, args); window.pgRedraws.push(performance.now() - t);
        return out; }; }"""
BOXES = """() => [...document.querySelectorAll('.pg-plot, .pg-card, #pg-lesson-panel')]
    .map(e => e.getBoundingClientRect().top)"""


def measure_once(browser, url: str, preset: str, seconds: float) -> dict:
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    try:
        page.goto(url)
        page.wait_for_selector(".pg-preset:enabled", timeout=120_000)
        page.get_by_role("button", name=preset).click()
        page.wait_for_selector("#pg-answer-0", state="visible", timeout=60_000)
        page.click("#pg-answer-0")
        page.wait_for_selector("#pg-plot-slots .js-plotly-plot .main-svg", timeout=60_000)
        page.wait_for_timeout(2000)
        page.evaluate(TIME_REDRAWS)
        cdp = page.context.new_cdp_session(page)
        cdp.send("Performance.enable")

        def metrics() -> dict:
            return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}

        before = metrics()
        time.sleep(seconds)
        after = metrics()
        t0 = time.monotonic()
        for _ in range(20):
            page.evaluate(BOXES)
        reads_s = time.monotonic() - t0
        redraws = page.evaluate("() => window.pgRedraws")
        row = {k: (after[k] - before[k]) / seconds for k in METRICS}
        row.update(
            box_reads_s=reads_s,
            redraws_per_s=len(redraws) / (seconds + reads_s),
            redraw_ms=statistics.mean(redraws) if redraws else None,
        )
        return row
    finally:
        page.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--preset", default="Chat burst")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output-json", type=Path)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    port = free_port()
    proc = start_server(args.root.resolve(), port, Path(f"/tmp/bench-page-{port}.log"))
    rows = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for _ in range(args.repeats):
                rows.append(measure_once(browser, f"http://127.0.0.1:{port}", args.preset,
                                         args.seconds))  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
            browser.close()
    finally:
        stop_server(proc)
    median = {k: statistics.median(r[k] for r in rows if r[k] is not None) for k in rows[0]}
    print(f"\n{args.root} ({args.preset}, {args.repeats} runs of {args.seconds:g} s, median)")
    print(
        "| renderer busy | script | style | layout | layouts/s | 20 box reads | redraws/s "
        "| per redraw |\n|---|---|---|---|---|---|---|---|"
    )
    print(
        f"| {median['TaskDuration']:.0%} | {median['ScriptDuration']:.0%} "
        f"| {median['RecalcStyleDuration']:.0%} | {median['LayoutDuration']:.0%} "
        f"| {median['LayoutCount']:.0f} | {median['box_reads_s']:.2f} s "
        f"| {median['redraws_per_s']:.1f} | {median['redraw_ms']:.0f} ms |"
    )
    if args.output_json:
        args.output_json.write_text(json.dumps({"root": str(args.root), "runs": rows}, indent=2))


if __name__ == "__main__":
    main()
