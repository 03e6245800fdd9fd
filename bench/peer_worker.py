"""One system's in-process runs for bench/bench_vllm.py, in a process of its own.

    python bench/peer_worker.py engine|vllm JOB.json RESULT.json

The engine side runs under the project's venv, the vLLM side under `.venv-vllm` (vLLM needs
its own transformers); so this file imports only the standard library at the top, and each
system's package inside its own function. JOB.json holds the model directory, the dtype,
the parts to run ("offline", "batch1", in one process: one load), the workload as token ids
and the quiet-CPU settings; RESULT.json gets each part's timings and output token counts.

  offline  all requests submitted at once, greedy, ignore_eos; wall time from the submission
           to the last token (one warm-up request before the clock starts)
  batch1   one prompt alone, timed with 1 and with N output tokens; decode s/token =
           (median time of N - median time of 1) / (N - 1), the same sum on both systems
"""

import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WARMUP_TOKENS = 4


def wait_for_quiet(max_load: float, cap_s: float) -> float:
    """Sleep until the 1-minute load average is under `max_load`, at most `cap_s` seconds;
    returns the load average when the wait ended."""
    deadline = time.monotonic() + cap_s
    while (load := os.getloadavg()[0]) >= max_load and time.monotonic() < deadline:
        time.sleep(2)
    return load


def group_processes(pgid: int) -> list[tuple[int, list[str]]]:
    """(pid, the fields of /proc/PID/stat after the command's name) of each process of group
    `pgid`, zombies included."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # ended while we looked
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid:
            found.append((int(stat.parent.name), fields))
    return found


def group_cpu_s(pgid: int) -> float:
    """The CPU time (user and system, all threads) the processes of group `pgid` have taken,
    zombies included (one that ends during a run keeps its time there until it is reaped):
    sampled before and after a run, what the run took (a vLLM engine core included)."""
    ticks = sum(int(fields[11]) + int(fields[12]) for _, fields in group_processes(pgid))
    return ticks / os.sysconf("SC_CLK_TCK")


# -- the engine ---------------------------------------------------------------------------------
def engine_system(job: dict):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from engine import LLMEngine, SamplingParams

    engine = LLMEngine.from_pretrained(
        "default",
        dtype=job["dtype"],
        max_num_seqs=job["max_num_seqs"],
        max_num_batched_tokens=job["max_num_batched_tokens"],
        num_kv_blocks=job["num_kv_blocks"],
    )
    ids = iter(range(1 << 62))

    def run(requests: list[tuple[list[int], int]]) -> list[int]:
        """Output token counts, in request order, of `requests` submitted at once."""
        start = time.monotonic()
        rids = [f"r{next(ids)}" for _ in requests]
        for rid, (prompt, max_tokens) in zip(rids, requests, strict=True):
            params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
            engine.add_request(rid, prompt, params, arrival_time=start)
        counts = {}
        while engine.has_unfinished_requests():
            for out in engine.step():
                if out.finished:
                    counts[out.request_id] = len(out.token_ids)
        return [counts[rid] for rid in rids]

    return run, {"engine_config": dataclasses.asdict(engine.config)}


# -- vLLM ---------------------------------------------------------------------------------------
def vllm_system(job: dict):
    import vllm
    from vllm import LLM, SamplingParams

    llm = LLM(model=job["model_dir"], dtype=job["dtype"], max_model_len=job["max_model_len"])

    def run(requests: list[tuple[list[int], int]]) -> list[int]:
        prompts = [{"prompt_token_ids": prompt} for prompt, _ in requests]
        params = [
            SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
            for _, max_tokens in requests
        ]
        outs = llm.generate(prompts, params, use_tqdm=False)
        return [len(o.outputs[0].token_ids) for o in outs]

    scheduler = llm.llm_engine.vllm_config.scheduler_config
    info = {
        "vllm": vllm.__version__,
        "max_num_seqs": scheduler.max_num_seqs,
        "max_num_batched_tokens": scheduler.max_num_batched_tokens,
        "env": {k: v for k, v in os.environ.items() if k.startswith("VLLM_")},
    }
    return run, info


SYSTEMS = {"engine": engine_system, "vllm": vllm_system}


# -- the parts ----------------------------------------------------------------------------------
def timed(run, requests, job: dict) -> dict:
    load = wait_for_quiet(job["max_load"], job["quiet_cap_s"])
    cpu_start, start = group_cpu_s(os.getpgrp()), time.perf_counter()
    counts = run(requests)
    wall = time.perf_counter() - start
    cpu = group_cpu_s(os.getpgrp()) - cpu_start
    return {"wall_s": wall, "cpu_s": cpu, "load_before": load, "token_counts": counts}


def offline(run, job: dict) -> dict:
    requests = [tuple(r) for r in job["workload"]]
    run([(requests[0][0][:8], WARMUP_TOKENS)])  # warm-up
    result = timed(run, requests, job)
    result["tokens_per_s"] = sum(result["token_counts"]) / result["wall_s"]
    return result


def batch1(run, job: dict) -> dict:
    prompt, max_tokens = job["batch1_prompt"], job["batch1_max_tokens"]
    run([(prompt, max_tokens)])  # warm-up
    short, long = [], []
    for _ in range(job["batch1_iters"]):  # taking turns: a noisy moment hits both alike
        short.append(timed(run, [(prompt, 1)], job))
        long.append(timed(run, [(prompt, max_tokens)], job))
    t_short = statistics.median(r["wall_s"] for r in short)
    t_long = statistics.median(r["wall_s"] for r in long)
    return {
        "prefill_s": t_short,
        "decode_s_per_token": (t_long - t_short) / (max_tokens - 1),
        "load_before": max(r["load_before"] for r in short + long),
        "token_counts": [c for r in long for c in r["token_counts"]],
        "expected_counts": [max_tokens] * len(long),
    }


PARTS = {"offline": offline, "batch1": batch1}


def main():
    system, job_path, result_path = sys.argv[1:]
    job = json.loads(Path(job_path).read_text())
    run, info = SYSTEMS[system](job)
    ready_at = time.time()  # the caller subtracts its own clock at the process start
    parts = {part: PARTS[part](run, job) for part in job["parts"]}
    Path(result_path).write_text(json.dumps({"ready_at": ready_at, "info": info, "parts": parts}))


if __name__ == "__main__":  # vLLM spawns its engine core process: the guard is required
    main()
