"""Scaling: the engine's output tokens/s and TTFT p95 versus concurrency and prompt length.

The engine (paged KV, continuous batching) alone, greedy, ignore_eos, every request arriving
at t=0, prompts cut from bench/corpus.txt with distinct offsets (no prefix-cache sharing):

  concurrency sweep:    --concurrency requests (1 4 16 64 256) of --prompt-len prompt tokens
  prompt-length sweep:  --prompt-lens (32 128 512 2048) at --sweep-concurrency requests

Prints Markdown tables; --plot-dir also writes them as PNG charts (Plotly figures, rendered
by the headless chromium the e2e tests use).

    python bench/bench_scaling.py --plot-dir bench
"""

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/bench_scaling.py` from the repo root
    sys.path.insert(0, str(ROOT))

import plotly.graph_objects as go  # noqa: E402
from plotly.subplots import make_subplots  # noqa: E402

from bench.common import machine_info  # noqa: E402
from bench.workload import make_workload  # noqa: E402
from engine import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from engine.loader import load_model  # noqa: E402
from engine.telemetry import percentile  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]


def run_point(model, tokenizer, args, num_requests: int, prompt_len: int) -> dict:
    """One sweep point on a fresh engine: tokens/s, TTFT p50/p95, TPOT p50."""
    workload = make_workload(tokenizer, num_requests, args.seed, prompt_len=(prompt_len,) * 2,
                             max_tokens=(args.max_tokens,) * 2)  # fmt: skip
    engine = LLMEngine(model, tokenizer, EngineConfig(max_num_seqs=args.max_num_seqs))
    warm = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    engine.generate([workload[0][0][:8]], warm)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True)
    t0 = time.monotonic()
    for i, (prompt, _) in enumerate(workload):
        engine.add_request(str(i), prompt, params, arrival_time=t0)
    outs = []
    while engine.has_unfinished_requests():
        outs += [o for o in engine.step() if o.finished]
    wall = time.monotonic() - t0
    ttfts = [o.metrics.ttft for o in outs]
    tpots = [o.metrics.tpot for o in outs if o.metrics.tpot is not None]
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    return {
        "requests": num_requests,
        "prompt_len": prompt_len,
        "output_tokens": tokens,
        "wall_s": wall,
        "tokens_per_s": tokens / wall,
        "ttft_p50_s": percentile(ttfts, 50),
        "ttft_p95_s": percentile(ttfts, 95),
        "tpot_p50_ms": 1e3 * percentile(tpots, 50) if tpots else None,
        "steps": engine.snapshot().step,
    }


def table(rows: list[dict], key: str, label: str) -> str:
    lines = [f"| {label} | output tok/s | TTFT p50 s | TTFT p95 s | TPOT p50 ms | wall s |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        tpot = "–" if r["tpot_p50_ms"] is None else f"{r['tpot_p50_ms']:.0f}"
        lines.append(
            f"| {r[key]} | {r['tokens_per_s']:.1f} | {r['ttft_p50_s']:.2f} | "
            f"{r['ttft_p95_s']:.2f} | {tpot} | {r['wall_s']:.1f} |"
        )
    return "\n".join(lines)


def scaling_figure(rows: list[dict], key: str, title: str) -> go.Figure:
    """Tokens/s (left) and TTFT p95 (right) against `key`, on log x axes."""
    xs = [r[key] for r in rows]
    fig = make_subplots(cols=2, subplot_titles=("output tokens/s", "TTFT p95 (s)"))
    fig.add_trace(go.Scatter(x=xs, y=[r["tokens_per_s"] for r in rows], mode="lines+markers",
                             line_color="#4f46e5"), row=1, col=1)  # fmt: skip
    fig.add_trace(go.Scatter(x=xs, y=[r["ttft_p95_s"] for r in rows], mode="lines+markers",
                             line_color="#f97316"), row=1, col=2)  # fmt: skip
    fig.update_xaxes(type="log", title_text=key.replace("_", " "), tickvals=xs)
    fig.update_layout(title=title, showlegend=False, width=900, height=380,
                      template="plotly_white", margin=dict(l=50, r=20, t=70, b=50))  # fmt: skip
    return fig


def write_png(fig: go.Figure, path: Path) -> None:
    """Render with chromium (Playwright): Plotly's own PNG export needs kaleido."""
    from playwright.sync_api import sync_playwright

    html = fig.to_html(include_plotlyjs=True, full_html=True, config={"staticPlot": True})
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 920, "height": 400})
        page.set_content(html)
        page.wait_for_selector(".main-svg")
        page.locator(".plotly-graph-div").screenshot(path=str(path))
        browser.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    parser.add_argument("--prompt-lens", type=int, nargs="+", default=[32, 128, 512, 2048])
    parser.add_argument("--sweep-concurrency", type=int, default=8)
    parser.add_argument("--plot-dir", default=None)
    parser.add_argument("--output-json", default=None)
    args = parser.parse_args()

    model, tokenizer = load_model(args.model)
    info = machine_info()
    settings = f"max_num_seqs={args.max_num_seqs}, max_tokens={args.max_tokens}"
    print(f"{info['cpu']}, {info['cores']} cores, torch {info['torch']}, {settings}", flush=True)
    by_concurrency, by_prompt = [], []
    for c in args.concurrency:
        by_concurrency.append(run_point(model, tokenizer, args, c, args.prompt_len))
        print(f"  {c} requests: {by_concurrency[-1]['tokens_per_s']:.1f} tok/s", flush=True)
    for n in args.prompt_lens:
        by_prompt.append(run_point(model, tokenizer, args, args.sweep_concurrency, n))
        print(f"  prompt {n}: {by_prompt[-1]['tokens_per_s']:.1f} tok/s", flush=True)
    print(f"\nConcurrent requests (prompt {args.prompt_len} tokens, {args.max_tokens} out):\n")
    print(table(by_concurrency, "requests", "requests"))
    print(f"\nPrompt length ({args.sweep_concurrency} requests, {args.max_tokens} out):\n")
    print(table(by_prompt, "prompt_len", "prompt tokens"))
    if args.plot_dir:
        out = Path(args.plot_dir)
        write_png(scaling_figure(by_concurrency, "requests", "Engine vs concurrent requests"),
                  out / "scaling_concurrency.png")  # fmt: skip
        write_png(scaling_figure(by_prompt, "prompt_len", "Engine vs prompt length"),
                  out / "scaling_prompt_len.png")  # fmt: skip
    if args.output_json:
        payload = {"machine": info, "args": vars(args), "concurrency": by_concurrency,
                   "prompt_len": by_prompt}  # fmt: skip
        Path(args.output_json).write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
