"""Throughput benchmark: the engine against transformers' own ways to serve a batch.

One fixed-seed workload (bench/workload.py), greedy, ignore_eos, every request arriving at
t=0, run in ONE process on ONE model object by up to eight systems:

  engine_continuous  LLMEngine, paged KV cache, continuous batching (the product; for
                     SmolLM2 model_impl "auto" runs the engine's native forward)
  engine_transformers  the same on the model's transformers modules (model_impl="transformers")
  engine_compiled    the transformers modules with torch_compile=True (compiled before the
                     clock starts)
  engine_static      LLMEngine, paged KV cache, static batching (a new batch when none runs)
  engine_hf_cache    LLMEngine, one transformers DynamicCache and one forward per sequence
  hf_generate        transformers `generate`, one request at a time
  hf_static          transformers `generate` on static batches of --hf-batch-size (left padding)
  hf_cb              transformers' continuous batching (the manager behind `generate_batch`)

Each system is warmed up once on a tiny request, then timed. Output tokens/s = generated
tokens / wall time from the workload start to the last token. TTFT = first token - workload
start; TPOT = (last token - first token) / (tokens - 1), per request, for every system (for
the transformers systems the time of each decoding step is taken by a logits processor or
transformers' own per-token timestamps). --check compares every system's tokens with
`generate` one by one under the correctness criterion of docs/ARCHITECTURE.md (exact,
near-tie, mismatch).

    python bench/bench_throughput.py --check                 # the full run (tens of minutes)
    python bench/bench_throughput.py --quick --check         # a smoke run
    python bench/bench_throughput.py --quick --trace-dir /tmp  # + a Chrome trace per engine run
"""

import argparse
import functools
import gc
import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/bench_throughput.py` from the repo root
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import LogitsProcessorList  # noqa: E402
from transformers.generation.configuration_utils import ContinuousBatchingConfig  # noqa: E402

from bench.common import StepTimes, classify, greedy_config, machine_info  # noqa: E402
from bench.workload import describe, make_workload  # noqa: E402
from engine import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from engine.loader import load_model  # noqa: E402
from engine.telemetry import percentile  # noqa: E402
from playground.record.replay import ReplayLog  # noqa: E402
from playground.record.trace import chrome_trace  # noqa: E402

SYSTEMS = {  # name -> table label
    "engine_continuous": "engine paged/continuous",
    "engine_transformers": "engine paged/continuous, transformers modules",
    "engine_compiled": "engine paged/continuous, torch.compile",
    "engine_static": "engine paged/static",
    "engine_hf_cache": "engine hf_cache",
    "hf_generate": "HF generate, one by one",
    "hf_static": "HF generate, static batches",
    "hf_cb": "HF generate_batch (CB)",
}
BASELINE = "engine_continuous"  # the numerator of the ratios
REFERENCE = "hf_generate"  # the correctness reference
OVERHEAD_MIN_SEQS = 28  # "about 32 running sequences" for the per-step overhead


@dataclass
class RunResult:
    system: str
    label: str
    wall: float  # seconds, workload start to last token
    token_ids: list[list[int]]  # per request, in workload order
    ttfts: list[float]  # seconds
    tpots: list[float]  # seconds
    load_before: float  # 1-minute load average when the run started
    cpu_pressure: float | None  # % of the run some task waited for a CPU (noise; ~0 = quiet)
    extra: dict = field(default_factory=dict)

    @property
    def num_output_tokens(self) -> int:
        return sum(len(t) for t in self.token_ids)

    @property
    def tokens_per_s(self) -> float:
        return self.num_output_tokens / self.wall

    def summary(self) -> dict:
        return {
            "system": self.system,
            "label": self.label,
            "wall_s": self.wall,
            "output_tokens": self.num_output_tokens,
            "tokens_per_s": self.tokens_per_s,
            "ttft_p50_s": percentile(self.ttfts, 50),
            "ttft_p95_s": percentile(self.ttfts, 95),
            "tpot_p50_s": percentile(self.tpots, 50),
            "tpot_p95_s": percentile(self.tpots, 95),
            "load_before": self.load_before,
            "cpu_pressure_pct": self.cpu_pressure,
            **self.extra,
        }


class NoisyRun(Exception):
    """Another process took CPU time during a timed run (see --quiet-pressure)."""


class NoiseGuard:
    """Aborts a timed run once, after `min_s`, its CPU pressure exceeds `threshold` %."""

    def __init__(self, threshold: float | None, min_s: float = 30.0):
        self.threshold, self.min_s = threshold, min_s
        self.start, self.stall = time.monotonic(), cpu_stall_us()

    def check(self) -> None:
        if self.threshold is None or self.stall is None:
            return
        elapsed = time.monotonic() - self.start
        if elapsed < self.min_s:
            return
        pressure = 100 * (cpu_stall_us() - self.stall) / 1e6 / elapsed
        if pressure > self.threshold:
            raise NoisyRun(f"CPU pressure {pressure:.0f} % after {elapsed:.0f} s")


# -- the engine ---------------------------------------------------------------------------------
def run_engine(model, tokenizer, workload, args, guard: NoiseGuard, trace=None, **overrides):
    """`trace`: a path for the timed run's Chrome trace (playground/record/trace.py), and next to it
    its replay file (`.replay.json`, playground/record/replay.py); None: neither."""
    config = EngineConfig(
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        num_kv_blocks=args.num_kv_blocks,
        **overrides,
    )
    engine = LLMEngine(model, tokenizer, config)
    warm = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    engine.generate([workload[0][0][:8]], warm)  # warmup
    records = {}  # step -> StepRecord of the timed run
    results = {}
    log = ReplayLog()
    t0 = time.monotonic()
    for i, (prompt, max_tokens) in enumerate(workload):
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        engine.add_request(str(i), prompt, params, arrival_time=t0)
        log.submitted(str(i), 0.0, prompt, params, None, f"request {i}", 0)
    num_steps = 0
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                results[int(out.request_id)] = out
        num_steps += 1
        if num_steps % 256 == 0:  # the snapshot keeps the last 512 steps
            records.update((r.step, r) for r in engine.snapshot().steps if r.start >= t0)
        if num_steps % 16 == 0:
            guard.check()
    wall = time.monotonic() - t0
    records.update((r.step, r) for r in engine.snapshot().steps if r.start >= t0)
    if trace is not None:  # the workload's requests (the snapshot keeps the last 256 finished)
        timed = [r for r in engine.snapshot().requests if r.arrival >= t0]
        Path(trace).write_text(json.dumps(chrome_trace(list(records.values()), timed)))
        for out in results.values():
            log.finished(out, 0.0)
        log.replay(config, False, "bench_throughput").write(
            Path(trace).with_name(Path(trace).name.replace(".trace.json", ".replay.json"))
        )
    outs = [results[i] for i in range(len(workload))]
    totals = engine.snapshot().totals
    extra = {
        "num_steps": num_steps,
        "num_preemptions": totals.num_preemptions,
        "num_cached_tokens": totals.num_cached_tokens,
        "num_kv_blocks": engine.config.num_kv_blocks,
        "step_overhead": step_overhead(list(records.values())),
    }
    del engine
    gc.collect()
    return (
        wall,
        [list(o.token_ids) for o in outs],
        [o.metrics.ttft for o in outs],
        [o.metrics.tpot for o in outs if o.metrics.tpot is not None],
        extra,
    )


def step_overhead(records) -> dict:
    """Per-step time outside the model forward, over the steps with >= OVERHEAD_MIN_SEQS."""

    def stats(rs):
        if not rs:
            return None
        total = sum(r.duration for r in rs)
        overhead = sum(r.duration - r.forward_duration for r in rs)
        return {
            "num_steps": len(rs),
            "mean_seqs": sum(r.num_seqs for r in rs) / len(rs),
            "mean_step_ms": 1e3 * total / len(rs),
            "mean_forward_ms": 1e3 * sum(r.forward_duration for r in rs) / len(rs),
            "mean_overhead_ms": 1e3 * overhead / len(rs),
            "overhead_pct": 100 * overhead / total,
        }

    busy = [r for r in records if r.num_seqs >= OVERHEAD_MIN_SEQS]
    return {
        "num_steps_total": len(records),
        "all": stats(busy),
        "decode_only": stats([r for r in busy if r.num_prefill_tokens == 0]),
        "with_prefill": stats([r for r in busy if r.num_prefill_tokens > 0]),
    }


# -- transformers `generate` --------------------------------------------------------------------
@torch.inference_mode()
def generate_batch_padded(model, tokenizer, batch, start: float):
    """`generate` on `batch` (list of (prompt, max_tokens)), left padded to one tensor.

    Runs to the longest max_tokens; each request keeps its own first max_tokens tokens.
    Returns per request (token_ids, ttft, tpot).
    """
    padded = tokenizer.pad({"input_ids": [p for p, _ in batch]}, return_tensors="pt")
    input_ids, mask = padded["input_ids"], padded["attention_mask"]  # (B, L), left padded
    timer = StepTimes()
    out = model.generate(
        input_ids=input_ids,
        attention_mask=mask,
        generation_config=greedy_config(max(m for _, m in batch), tokenizer.pad_token_id),
        logits_processor=LogitsProcessorList([timer]),
    )
    new = out[:, input_ids.shape[1] :].tolist()  # (B, max_new_tokens)
    t = timer.times
    rows = []
    for row, (_, max_tokens) in zip(new, batch, strict=True):
        tpot = (t[max_tokens - 1] - t[0]) / (max_tokens - 1) if max_tokens > 1 else None
        rows.append((row[:max_tokens], t[0] - start, tpot))
    return rows


def run_hf_batches(model, tokenizer, workload, batch_size: int, guard: NoiseGuard):
    tokenizer.padding_side = "left"
    generate_batch_padded(model, tokenizer, [(workload[0][0][:8], 4)], time.perf_counter())
    rows = []
    t0 = time.perf_counter()
    for i in range(0, len(workload), batch_size):
        rows += generate_batch_padded(model, tokenizer, workload[i : i + batch_size], t0)
        guard.check()
    wall = time.perf_counter() - t0
    return wall, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows if r[2]], {}


# -- transformers continuous batching -----------------------------------------------------------
@torch.inference_mode()
def run_hf_cb(model, tokenizer, workload, args):
    """transformers' continuous batching, through the manager that `generate_batch` drives.

    `generate_batch` takes one max_new_tokens for all requests; its manager's `add_request`
    takes one per request, so the requests go in through the same context manager
    `generate_batch` opens. The cache is capped (num_blocks, max_batch_tokens): uncapped
    it sizes itself from memory and takes GBs on a CPU.
    """
    cb_config = ContinuousBatchingConfig(
        page_size=args.cb_page_size,
        num_blocks=args.cb_num_blocks,
        max_batch_tokens=args.max_num_batched_tokens,
        max_requests_per_batch=args.max_num_seqs,
    )
    gen_config = greedy_config(max(m for _, m in workload), tokenizer.pad_token_id)
    saved = model.config._attn_implementation  # "paged" after an engine ran: CB refuses it
    model.set_attn_implementation("sdpa")
    try:
        _run_cb(model, [(workload[0][0][:8], 4)], gen_config, cb_config)  # warmup
        start, results = _run_cb(model, workload, gen_config, cb_config)
    finally:
        model.set_attn_implementation(saved)
    end = max(r.timestamps[-1] for r in results)
    return (
        end - start,
        [list(r.generated_tokens) for r in results],
        [r.timestamps[0] - start for r in results],
        [
            (r.timestamps[-1] - r.timestamps[0]) / (len(r.timestamps) - 1)
            for r in results
            if len(r.timestamps) > 1
        ],
        {"cb_page_size": args.cb_page_size, "cb_num_blocks": args.cb_num_blocks},
    )


def _run_cb(model, workload, gen_config, cb_config):
    """(start, results): start once the manager is up (its cache allocated, like the engine's)."""
    ids = [f"r{i}" for i in range(len(workload))]
    results = {}
    with model.continuous_batching_context_manager(
        generation_config=gen_config, continuous_batching_config=cb_config, block=True, timeout=60
    ) as manager:
        start = time.perf_counter()
        for rid, (prompt, max_tokens) in zip(ids, workload, strict=True):
            manager.add_request(
                prompt, request_id=rid, max_new_tokens=max_tokens, record_timestamps=True,
                eos_token_id=-1,
            )  # fmt: skip
        while len(results) < len(ids):
            r = manager.get_result(timeout=1)
            if r is not None and r.is_finished():
                if r.error is not None:
                    raise RuntimeError(f"transformers CB failed request {r.request_id}: {r.error}")
                results[r.request_id] = r
            elif r is None and not manager.is_running():
                raise RuntimeError("transformers CB: the generation thread died")
    return start, [results[i] for i in ids]


# -- correctness --------------------------------------------------------------------------------
def reference_tokens(model, tokenizer, workload) -> list[list[int]]:
    out = []
    for prompt, max_tokens in workload:
        out += [r[0] for r in generate_batch_padded(model, tokenizer, [(prompt, max_tokens)], 0.0)]
    return out


def check(model, workload, result: RunResult, ref: list[list[int]]) -> dict:
    counts = {"exact": 0, "near_tie": 0, "mismatch": 0}
    mismatched = []
    for i, ((prompt, _), r, g) in enumerate(zip(workload, ref, result.token_ids, strict=True)):
        verdict = classify(model, prompt, r, g)
        counts[verdict] += 1
        if verdict == "mismatch":
            mismatched.append(i)
    counts["mismatched_requests"] = mismatched
    return counts


# -- the run ------------------------------------------------------------------------------------
def cpu_stall_us() -> int | None:
    """Microseconds some task waited for a CPU since boot (Linux PSI), None when unknown."""
    try:
        with open("/proc/pressure/cpu") as f:
            some = f.readline().split()
        return int(some[-1].removeprefix("total="))
    except (OSError, ValueError, IndexError):
        return None


def cpu_pressure_avg10() -> float | None:
    """% of the last 10 s some task waited for a CPU (Linux PSI), None when unknown."""
    try:
        with open("/proc/pressure/cpu") as f:
            return float(f.readline().split()[1].removeprefix("avg10="))
    except (OSError, ValueError, IndexError):
        return None


def wait_for_quiet(threshold: float, settle_s: float = 30, timeout_s: float = 3600) -> float:
    """Block until CPU pressure stays under `threshold` % for `settle_s` plus a random 0-30 s
    (two benchmarks waiting alike would otherwise start together and abort each other again
    and again); returns the seconds waited."""
    settle_s += random.uniform(0, 30)
    start = quiet_since = time.monotonic()
    while time.monotonic() - start < timeout_s:
        pressure = cpu_pressure_avg10()
        if pressure is None:
            break
        now = time.monotonic()
        if pressure >= threshold:
            quiet_since = now
        elif now - quiet_since >= settle_s:
            break
        time.sleep(2)
    return time.monotonic() - start


def print_ratios(base: RunResult | None, results: list[RunResult]) -> dict[str, float]:
    """tokens/s of `base` over each other result's; {} without a base."""
    if base is None:
        return {}
    print()
    ratios = {}
    for r in results:
        if r.system != base.system:
            ratios[r.system] = base.tokens_per_s / r.tokens_per_s
            print(f"{base.label} / {r.label}: {ratios[r.system]:.2f}x tok/s")
    return ratios


def run_system(name, model, tokenizer, workload, args, guard: NoiseGuard) -> RunResult:
    """Warm up and time one system; NoisyRun when `guard` sees too much CPU pressure."""
    load = os.getloadavg()[0]
    stall, start = cpu_stall_us(), time.monotonic()
    trace = Path(args.trace_dir) / f"{name}.trace.json" if args.trace_dir else None
    engine = functools.partial(run_engine, model, tokenizer, workload, args, guard, trace=trace)
    if name == "engine_continuous":
        run = engine(batching="continuous")
    elif name == "engine_transformers":
        run = engine(batching="continuous", model_impl="transformers")
    elif name == "engine_compiled":
        run = engine(batching="continuous", torch_compile=True)
    elif name == "engine_static":
        run = engine(batching="static")
    elif name == "engine_hf_cache":
        run = engine(kv_backend="hf_cache")
    elif name == "hf_generate":
        run = run_hf_batches(model, tokenizer, workload, 1, guard)
    elif name == "hf_static":
        run = run_hf_batches(model, tokenizer, workload, args.hf_batch_size, guard)
    elif name == "hf_cb":  # a few minutes at most; not aborted midway
        run = run_hf_cb(model, tokenizer, workload, args)
    else:
        raise ValueError(f"unknown system {name!r}")
    wall, token_ids, ttfts, tpots, extra = run
    pressure = None
    if stall is not None and (now := cpu_stall_us()) is not None:
        pressure = 100 * (now - stall) / 1e6 / (time.monotonic() - start)
    label = SYSTEMS[name]
    if name == "hf_static":
        label += f" of {args.hf_batch_size}"
    result = RunResult(name, label, wall, token_ids, ttfts, tpots, load, pressure, extra)
    wrong = [
        i
        for i, (got, (_, want)) in enumerate(zip(token_ids, workload, strict=True))
        if len(got) != want
    ]
    if wrong:
        result.extra["wrong_length_requests"] = wrong
    return result


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} %"


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1e3 * seconds:.0f}"


def secs(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}"


def format_table(results: list[RunResult], checks: dict) -> str:
    head = (
        "| system | tok/s | wall s | TTFT p50 s | TTFT p95 s | TPOT p50 ms | TPOT p95 ms | "
        "exact / near-tie / mismatch |"
    )
    lines = [head, "|" + "---|" * 8]
    for r in results:
        s = r.summary()
        c = checks.get(r.system)
        verdict = f"{c['exact']} / {c['near_tie']} / {c['mismatch']}" if c else "-"
        lines.append(
            f"| {r.label} | {s['tokens_per_s']:.1f} | {r.wall:.1f} | {secs(s['ttft_p50_s'])} | "
            f"{secs(s['ttft_p95_s'])} | {ms(s['tpot_p50_s'])} | {ms(s['tpot_p95_s'])} | {verdict} |"
        )
    return "\n".join(lines)


def format_overhead(result: RunResult) -> list[str]:
    lines = []
    for part in ("all", "decode_only", "with_prefill"):
        s = result.extra["step_overhead"][part]
        if s is None:
            continue
        lines.append(
            f"{result.label}, steps with >= {OVERHEAD_MIN_SEQS} seqs ({part}, {s['num_steps']} "
            f"steps, {s['mean_seqs']:.1f} seqs): step {s['mean_step_ms']:.1f} ms, forward "
            f"{s['mean_forward_ms']:.1f} ms, overhead {s['mean_overhead_ms']:.2f} ms "
            f"= {s['overhead_pct']:.1f} % of step time"
        )
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help=f"comma-separated, of: {', '.join(SYSTEMS)}"
    )
    parser.add_argument("--max-num-seqs", type=int, default=64)  # the whole workload at once
    # 2048: prefill chunks make bigger GEMMs (152 vs 137 tok/s, mean of 3 runs each, vs 512);
    # transformers' generate_batch gets the same budget
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--num-kv-blocks", type=int, default=None, help="None: the engine sizes it")
    parser.add_argument("--hf-batch-size", type=int, default=16)
    parser.add_argument("--cb-page-size", type=int, default=64, help="transformers CB page size")
    parser.add_argument(
        "--cb-num-blocks", type=int, default=320, help="transformers CB cache capacity, in pages"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument(
        "--transformers-layout",
        choices=["shared", "stock"],
        default="shared",
        help="shared: the transformers systems run on the engine's model object, with its CPU "
        "weight layout; stock: on a second copy in transformers' own layout",
    )
    parser.add_argument(
        "--quiet-pressure",
        type=float,
        default=None,
        help="on a shared machine: before each system wait until CPU pressure (PSI) stays "
        "under this %%, and re-run a system whose run saw more (up to --retries times)",
    )
    parser.add_argument("--retries", type=int, default=2)
    parser.add_argument("--check", action="store_true", help="compare tokens with `generate`")
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument("--output-json", default=None)
    parser.add_argument(
        "--trace-dir",
        default=None,
        help="write each engine system's run as <system>.trace.json, a Chrome trace (Perfetto), "
        "and its workload as <system>.replay.json",
    )
    args = parser.parse_args()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        parser.error(f"unknown system(s) {unknown}; choose from {list(SYSTEMS)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()  # eos_token_id=-1 warns on every generate call
    torch.manual_seed(args.seed)

    model, tokenizer = load_model(args.model)
    if args.quick:
        workload = make_workload(
            tokenizer, min(args.num_requests, 8), args.seed, prompt_len=(20, 80), max_tokens=(8, 24)
        )
    else:
        workload = make_workload(tokenizer, args.num_requests, args.seed)
    info = machine_info()
    print(
        f"{info['cpu']}, {info['cores']} cores, torch {info['torch']} ({info['torch_threads']} "
        f"threads), transformers {info['transformers']}, {next(model.parameters()).dtype}"
    )
    print(f"workload (seed {args.seed}): {describe(workload)}", flush=True)

    stock = None
    if args.transformers_layout == "stock" and any(n.startswith("hf_") for n in systems):
        stock, _ = load_model(args.model, cpu_layout=False)
    results: list[RunResult] = []
    for name in systems:
        system_model = stock if stock is not None and name.startswith("hf_") else model
        for attempt in range(1, args.retries + 2):
            last = attempt == args.retries + 1
            if args.quiet_pressure is not None:
                waited = wait_for_quiet(args.quiet_pressure)
                if waited > 5:
                    print(f"  (waited {waited:.0f} s for a quiet CPU)", flush=True)
            guard = NoiseGuard(None if last else args.quiet_pressure)
            try:
                result = run_system(name, system_model, tokenizer, workload, args, guard)
            except NoisyRun as noisy:
                print(f"  {SYSTEMS[name]}: aborted ({noisy}), retrying", flush=True)
                gc.collect()
                continue
            result.extra["attempts"] = attempt
            print(
                f"  {result.label}: {result.tokens_per_s:.1f} tok/s, {result.wall:.1f} s "
                f"(load {result.load_before:.2f} before, CPU pressure {pct(result.cpu_pressure)})",
                flush=True,
            )
            noisy = result.cpu_pressure is not None and result.cpu_pressure > (
                args.quiet_pressure if args.quiet_pressure is not None else float("inf")
            )
            if not noisy or last:
                break
        results.append(result)

    checks = {}
    if args.check:
        by_name = {r.system: r for r in results}
        if REFERENCE in by_name:
            ref = by_name[REFERENCE].token_ids
        else:
            ref = reference_tokens(model, tokenizer, workload)
        for r in results:
            checks[r.system] = check(model, workload, r, ref)

    print()
    print(format_table(results, checks))
    by_name = {r.system: r for r in results}
    ratios = print_ratios(by_name.get(BASELINE), results)
    compiled_ratios = print_ratios(
        by_name.get("engine_compiled"), [r for r in results if r.system.startswith("hf_")]
    )
    overhead_lines = []
    for r in results:
        if r.system.startswith("engine_") and r.system != "engine_hf_cache":
            overhead_lines += format_overhead(r)
    if overhead_lines:
        print()
        print("\n".join(overhead_lines))
    for r in results:
        if "wrong_length_requests" in r.extra:
            print(f"WARNING {r.label}: wrong output length for {r.extra['wrong_length_requests']}")
    if checks:
        bad = {n: c["mismatched_requests"] for n, c in checks.items() if c["mismatch"]}
        if bad:
            print(f"\nmismatches (request indices): {bad}")

    if BASELINE in by_name:
        base = by_name[BASELINE]
        parts = [f"{base.tokens_per_s:.1f} tok/s"]
        parts += [f"{ratios[n]:.2f}x {n}" for n in ratios]
        if checks.get(BASELINE):
            c = checks[BASELINE]
            parts.append(f"{c['exact']}+{c['near_tie']}/{len(workload)} correct")
        oh = base.extra["step_overhead"]["all"]
        if oh:
            parts.append(f"overhead {oh['overhead_pct']:.1f} % at {oh['mean_seqs']:.0f} seqs")
        print(f"\n{base.label}: " + ", ".join(parts))  # the one summary line

    if args.output_json:
        payload = {
            "machine": info,
            "args": vars(args),
            "workload": {
                "num_requests": len(workload),
                "num_prompt_tokens": sum(len(p) for p, _ in workload),
                "num_output_tokens": sum(m for _, m in workload),
            },
            "results": [r.summary() for r in results],
            "ratios": ratios,
            "compiled_ratios": compiled_ratios,
            "checks": checks,
            "load_after": os.getloadavg()[0],
        }
        Path(args.output_json).write_text(json.dumps(payload, indent=2, default=str))


if __name__ == "__main__":
    main()
