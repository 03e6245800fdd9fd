"""Where an engine step spends its time at ~32 running sequences (for optimising).

Runs the benchmark workload through LLMEngine (paged, continuous) and, once a step produces
tokens for at least --min-seqs sequences, profiles the next --steps such steps with
torch.profiler (operators, self CPU time) and cProfile (Python functions, own time).

    python bench/profile_engine.py --steps 20
"""

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from bench.workload import describe, make_workload  # noqa: E402
from engine import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from engine.loader import load_model  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-num-seqs", type=int, default=32)
    parser.add_argument("--max-num-batched-tokens", type=int, default=512)
    parser.add_argument("--min-seqs", type=int, default=28)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()

    model, tokenizer = load_model(args.model)
    workload = make_workload(tokenizer, args.num_requests, args.seed)
    print(f"workload (seed {args.seed}): {describe(workload)}")
    config = EngineConfig(
        max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens
    )
    engine = LLMEngine(model, tokenizer, config)
    engine.generate([workload[0][0][:8]], SamplingParams(max_tokens=4, temperature=0.0))  # warmup
    for i, (prompt, max_tokens) in enumerate(workload):
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        engine.add_request(str(i), prompt, params)

    while engine.has_unfinished_requests() and len(engine.step()) < args.min_seqs:
        pass  # run up to the first step with >= min_seqs sequences
    py = cProfile.Profile()
    num_seqs, num_prefill = [], []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(args.steps):
            py.enable()
            outs = engine.step()
            py.disable()
            num_seqs.append(len(outs))
        elapsed = time.perf_counter() - start
    for r in engine.snapshot().steps[-args.steps :]:
        num_prefill.append(r.num_prefill_tokens)
    print(
        f"profiled {args.steps} steps, {sum(num_seqs) / len(num_seqs):.1f} sequences and "
        f"{sum(num_prefill) / len(num_prefill):.0f} prefill tokens per step on average, "
        f"{1e3 * elapsed / args.steps:.1f} ms/step (with profiler overhead)"
    )
    print("\n== torch operators, by self CPU time ==")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))
    out = io.StringIO()
    pstats.Stats(py, stream=out).sort_stats("tottime").print_stats(args.top)
    print("== Python functions (cProfile), by own time ==")
    print(out.getvalue())
    out = io.StringIO()
    pstats.Stats(py, stream=out).sort_stats("cumulative").print_stats(args.top)
    print("== Python functions (cProfile), by cumulative time ==")
    print(out.getvalue())


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
