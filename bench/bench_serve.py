"""vLLM's own serving benchmark, `vllm bench serve`, against `python app.py` and `vllm serve`.

Each server starts with its defaults (the app: no flags but the port; vLLM: the default
model's weights, fp32, as bench/bench_vllm.py starts it), then vLLM's client (from
.venv-vllm, through bench/vllm_bench_serve.py) sends the same requests at each concurrency, streamed
on /v1/chat/completions: dataset `random` (fixed lengths) and `shaped` (random lengths within
+-50 % after a shared 32-token prefix, which the prefix caches of both servers reuse). Every
run must finish with 0 failed requests; the table shows throughput, TTFT, TPOT and ITL side
by side (written to bench/out/serve.md with --output-md).

    make bench-serve                      # or: python bench/bench_serve.py --help
"""

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_vllm import MAX_MODEL_LEN, SERVED_NAME, vllm_env  # noqa: E402
from bench.peer_http import free_port, stop, wait_ready  # noqa: E402
from engine.loader import _resolve_source  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = {  # name -> what the table's note calls it
    "engine": "`python app.py` (its defaults)",
    "vllm": "vLLM's CPU build (`vllm serve`'s server, fp32)",
}
DATASETS = {  # name -> vllm bench serve's dataset flags (lengths from --input-len/--output-len)
    "random": ["--random-range-ratio", "0"],
    "shaped": ["--random-range-ratio", "0.5", "--random-prefix-len", "32"],
}
COLUMNS = [  # (header, result key, format)
    ("req/s", "request_throughput", "{:.2f}"),
    ("out tok/s", "output_throughput", "{:.1f}"),
    ("TTFT p50 ms", "median_ttft_ms", "{:.0f}"),
    ("TTFT p99 ms", "p99_ttft_ms", "{:.0f}"),
    ("TPOT p50 ms", "median_tpot_ms", "{:.1f}"),
    ("ITL p50 ms", "median_itl_ms", "{:.1f}"),
    ("ITL p99 ms", "p99_itl_ms", "{:.1f}"),
]


def server_command(system: str, port: int, args) -> tuple[list[str], str, dict | None]:
    """(command, health route, environment) of one system's server, with its defaults."""
    if system == "engine":
        return [sys.executable, "app.py", "--port", str(port)], "/health", None
    command = [
        args.vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model_dir,
        "--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN), "--port", str(port),
        "--served-model-name", SERVED_NAME,
    ]  # fmt: skip
    return command, "/health", vllm_env(args)


def bench_serve(base_url: str, dataset: str, concurrency: int, args, result_dir: Path) -> dict:
    """One `vllm bench serve` run against `base_url`; its result JSON."""
    name = f"{dataset}-c{concurrency}.json"
    command = [
        args.vllm_python, str(ROOT / "bench" / "vllm_bench_serve.py"),
        "--backend", "openai-chat", "--base-url", base_url, "--endpoint", "/v1/chat/completions",
        "--model", SERVED_NAME, "--tokenizer", args.model_dir, "--dataset-name", "random",
        "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
        *DATASETS[dataset], "--num-prompts", str(args.num_prompts), "--max-concurrency",
        str(concurrency), "--ignore-eos", "--seed", "0", "--percentile-metrics", "ttft,tpot,itl",
        "--metric-percentiles", "50,99", "--disable-tqdm", "--save-result",
        "--result-dir", str(result_dir), "--result-filename", name,
    ]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=vllm_env(args))
    if run.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed:\n{run.stdout[-3000:]}{run.stderr[-3000:]}")
    return json.loads((result_dir / name).read_text())


def run_system(system: str, args) -> dict:
    """Start `system`'s server, run every dataset and concurrency against it, stop it."""
    port = free_port()
    command, health, env = server_command(system, port, args)
    result_dir = args.log_dir / system
    result_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    with open(args.log_dir / f"{system}-server.log", "w") as log:
        proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)  # fmt: skip
        try:
            wait_ready(proc, f"http://127.0.0.1:{port}{health}", args.ready_timeout)
            for dataset in args.datasets:
                for c in args.concurrency:
                    r = bench_serve(f"http://127.0.0.1:{port}", dataset, c, args, result_dir)
                    results[f"{dataset}/{c}"] = r
                    print(
                        f"{system:6} {dataset:6} c={c:<3} completed {r['completed']:3} "
                        f"failed {r['failed']}  {r['output_throughput']:.1f} tok/s",
                        flush=True,
                    )
        finally:
            stop(proc)
    return results


def table(results: dict, args) -> list[str]:
    head = ["dataset", "concurrency", "system", "completed", "failed", *(h for h, _, _ in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for dataset in args.datasets:
        for c in args.concurrency:
            for system in args.systems:
                r = results[system][f"{dataset}/{c}"]
                cells = [fmt.format(r[key]) for _, key, fmt in COLUMNS]
                row = [dataset, str(c), system, str(r["completed"]), str(r["failed"]), *cells]
                lines.append("| " + " | ".join(row) + " |")
    return lines


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="engine (app.py), vllm")
    parser.add_argument("--datasets", default=",".join(DATASETS), help=", ".join(DATASETS))
    parser.add_argument("--concurrency", default="1,8,32,64", help="vllm bench serve's "
                        "--max-concurrency, one run each")  # fmt: skip
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--kv-cache-gib", type=int, default=2, help="VLLM_CPU_KVCACHE_SPACE")
    parser.add_argument(
        "--vllm-reserved-cpus",
        type=int,
        default=0,
        help="VLLM_CPU_NUM_OF_RESERVED_CPU (0: vLLM computes on every core)",
    )
    parser.add_argument("--ready-timeout", type=float, default=600.0, help="server start, s")
    parser.add_argument("--log-dir", type=Path, default=ROOT / "bench" / "out" / "serve")
    parser.add_argument("--output-md", type=Path, default=None, help="write the table here")
    args = parser.parse_args()
    args.systems = [s for s in args.systems.split(",") if s]
    args.datasets = [d for d in args.datasets.split(",") if d]
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c]
    if set(args.systems) - set(SYSTEMS) or set(args.datasets) - set(DATASETS):
        parser.error(f"--systems of {tuple(SYSTEMS)}, --datasets of {tuple(DATASETS)}")
    if not Path(args.vllm_python).exists():
        parser.error(f"{args.vllm_python} not found: `make .venv-vllm/.stamp` builds it")
    args.model_dir = _resolve_source("default", None)  # the cached fp32 conversion
    return args


def main():
    args = parse_args()
    args.log_dir.mkdir(parents=True, exist_ok=True)
    start, load = time.time(), os.getloadavg()
    results = {system: run_system(system, args) for system in args.systems}
    lines = table(results, args)
    print("\n".join(lines))
    failed = sum(r["failed"] for rs in results.values() for r in rs.values())
    if args.output_md:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip()  # fmt: skip
        when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        against = " and ".join(SYSTEMS[s] for s in args.systems)
        note = (f"`make bench-serve`, {when}, commit {commit}: vLLM's `vllm bench serve` "
                f"(openai-chat, {args.num_prompts} prompts, {args.input_len} in / "
                f"{args.output_len} out, --ignore-eos) against {against}; "
                f"{time.time() - start:.0f} s in all, load average {load[0]:.1f} at the start "
                f"and {os.getloadavg()[0]:.1f} at the end (2 cores): compare the systems side by "
                "side.")  # fmt: skip
        args.output_md.write_text("# Serving: vLLM's own benchmark client\n\n" + note + "\n\n"
                                  + "\n".join(lines) + "\n")  # fmt: skip
    if failed:
        sys.exit(f"{failed} requests failed")


if __name__ == "__main__":
    main()
