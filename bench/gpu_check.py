"""GPU throughput check: the engine against transformers on random-weight models, in bf16.

For each model (bench/random_models.py) and each concurrency N, N requests of random token
ids arrive at once (greedy, ignore_eos, fixed seed), served by three systems in turn:

  engine     LLMEngine: paged KV cache, continuous batching, max_num_seqs = N
  hf_static  transformers `generate` on one static batch of the N requests (left padded,
             run to the longest max_tokens; each request keeps its own first max_tokens)
  hf_cb      transformers' continuous batching: the manager behind `generate_batch`

Each is warmed up (the engine and `generate` on a short request, the CB manager by its own
warm-up), then timed: output tokens/s = generated tokens / wall time, TPOT = time per output
token after the first (p50 over requests). The N=1 rows give batch-1 ms per token. After
every row the JSON and a markdown table are rewritten in --out, so a run stopped by its time
box keeps what it measured; rows that would start after --budget-s are skipped and listed.

    python bench/gpu_check.py --out /tmp/out                    # on a CUDA machine
    python bench/gpu_check.py --device cpu --models tiny --concurrency 1,4 --max-tokens 4,8
"""

import argparse
import dataclasses
import gc
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/gpu_check.py` from the repo root
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import LogitsProcessorList  # noqa: E402
from transformers.generation.configuration_utils import ContinuousBatchingConfig  # noqa: E402

from bench.common import StepTimes, greedy_config, machine_info  # noqa: E402
from bench.random_models import EOS_TOKEN_ID, random_model, word_tokenizer  # noqa: E402
from engine import EngineConfig, LLMEngine, SamplingParams  # noqa: E402

SYSTEMS = ("engine", "hf_static", "hf_cb")
BLOCK_SIZE = 16  # the engine's KV block
CB_PAGE_SIZE = 256  # transformers CB's page (its default)


def make_requests(vocab_size, num_requests, prompt_len, max_tokens, seed):
    """`num_requests` (prompt_token_ids, max_tokens) of random ids past the special ones."""
    rng = random.Random(seed)
    return [
        ([rng.randrange(3, vocab_size) for _ in range(rng.randint(*prompt_len))],
         rng.randint(*max_tokens))
        for _ in range(num_requests)
    ]  # fmt: skip


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median(values: list[float]) -> float | None:
    values = sorted(values)
    return values[len(values) // 2] if values else None


# -- the systems: each returns (wall_s, token_ids per request, tpots) ------------------------
def run_engine(model, tokenizer, requests, device):
    longest = max(len(p) + m for p, m in requests)
    config = EngineConfig(
        max_num_seqs=len(requests),
        max_num_batched_tokens=4096,
        block_size=BLOCK_SIZE,
        num_kv_blocks=len(requests) * -(-longest // BLOCK_SIZE) + 64,
    )
    engine = LLMEngine(model, tokenizer, config, seed=0)
    engine.generate([requests[0][0][:8]], SamplingParams(max_tokens=4, temperature=0.0))
    synchronize(device)
    t0 = time.monotonic()
    for i, (prompt, max_tokens) in enumerate(requests):
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        engine.add_request(str(i), prompt, params, arrival_time=t0)
    finals = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                finals[int(out.request_id)] = out
    synchronize(device)
    wall = time.monotonic() - t0
    outs = [finals[i] for i in range(len(requests))]
    return wall, [list(o.token_ids) for o in outs], [o.metrics.tpot for o in outs]


@torch.inference_mode()
def generate_static(model, requests, device):
    """One `generate` over all `requests`, left padded: (token ids per request, step times)."""
    width = max(len(p) for p, _ in requests)
    input_ids = torch.full((len(requests), width), EOS_TOKEN_ID, dtype=torch.long)
    mask = torch.zeros((len(requests), width), dtype=torch.long)
    for row, (prompt, _) in enumerate(requests):
        input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    timer = StepTimes()
    out = model.generate(
        input_ids=input_ids.to(device),
        attention_mask=mask.to(device),
        generation_config=greedy_config(max(m for _, m in requests), EOS_TOKEN_ID),
        logits_processor=LogitsProcessorList([timer]),
    )
    new = out[:, width:].tolist()
    return [row[:m] for row, (_, m) in zip(new, requests, strict=True)], timer.times


def run_hf_static(model, requests, device):
    model.set_attn_implementation("sdpa")
    generate_static(model, [(requests[0][0][:8], 4)], device)
    synchronize(device)
    t0 = time.perf_counter()
    token_ids, times = generate_static(model, requests, device)
    synchronize(device)
    wall = time.perf_counter() - t0
    tpots = [(times[m - 1] - times[0]) / (m - 1) for _, m in requests if m > 1]
    return wall, token_ids, tpots


def cb_config(requests) -> ContinuousBatchingConfig:
    """A capped cache (uncapped it sizes itself from free memory). transformers 5.17 names
    the page `block_size`, later versions `page_size`."""
    longest = max(len(p) + m for p, m in requests)
    names = {f.name for f in dataclasses.fields(ContinuousBatchingConfig)}
    page = "page_size" if "page_size" in names else "block_size"
    return ContinuousBatchingConfig(
        **{page: CB_PAGE_SIZE},
        num_blocks=len(requests) * -(-longest // CB_PAGE_SIZE) + 16,
        max_batch_tokens=4096,
        max_requests_per_batch=len(requests),
    )


def cb_generate(model, requests, config):
    """(start, results in request order): start once the manager is up (cache allocated).
    Not under inference_mode: transformers 5.17's generation thread writes in place to
    tensors its manager makes here, which inference_mode would forbid."""
    gen_config = greedy_config(max(m for _, m in requests), EOS_TOKEN_ID)
    results = {}
    with model.continuous_batching_context_manager(
        generation_config=gen_config, continuous_batching_config=config, block=True, timeout=60
    ) as manager:
        start = time.perf_counter()
        for i, (prompt, max_tokens) in enumerate(requests):
            manager.add_request(
                prompt, request_id=str(i), max_new_tokens=max_tokens, record_timestamps=True,
                eos_token_id=-1,
            )  # fmt: skip
        while len(results) < len(requests):
            r = manager.get_result(timeout=1)
            if r is not None and r.is_finished():
                if r.error is not None:
                    raise RuntimeError(f"transformers CB failed request {r.request_id}: {r.error}")
                results[int(r.request_id)] = r
            elif r is None and not manager.is_running():
                raise RuntimeError("transformers CB: the generation thread died")
    return start, [results[i] for i in range(len(requests))]


def run_hf_cb(model, requests, device):
    model.set_attn_implementation("sdpa")  # CB refuses the engine's "paged"
    # No warm-up call: the context manager warms up (captures its CUDA graphs) before start
    start, results = cb_generate(model, requests, cb_config(requests))
    wall = max(r.timestamps[-1] for r in results) - start
    tpots = [
        (r.timestamps[-1] - r.timestamps[0]) / (len(r.timestamps) - 1)
        for r in results
        if len(r.timestamps) > 1
    ]
    return wall, [list(r.generated_tokens) for r in results], tpots


def run_system(system, model, tokenizer, requests, device) -> dict:
    if system == "engine":
        wall, token_ids, tpots = run_engine(model, tokenizer, requests, device)
    elif system == "hf_static":
        wall, token_ids, tpots = run_hf_static(model, requests, device)
    else:
        wall, token_ids, tpots = run_hf_cb(model, requests, device)
    wrong = [
        i for i, (t, (_, m)) in enumerate(zip(token_ids, requests, strict=True)) if len(t) != m
    ]
    num_tokens = sum(len(t) for t in token_ids)
    tpot = median([t for t in tpots if t is not None])
    return {
        "wall_s": wall,
        "output_tokens": num_tokens,
        "tokens_per_s": num_tokens / wall,
        "tpot_p50_ms": None if tpot is None else 1e3 * tpot,
        "wrong_length_requests": wrong,
    }


def label(key: dict) -> str:
    return f"{key['model']} N={key['concurrency']} {key['system']}"


def measure(report: dict, key: dict, model, tokenizer, requests, device) -> None:
    """Time one system on `requests`; append its row, or its error, to `report`."""
    try:
        row = run_system(key["system"], model, tokenizer, requests, device)
    except Exception as exc:  # one system failing must not lose the other rows
        report["errors"].append(f"{label(key)}: {type(exc).__name__}: {exc}")
        print(f"{label(key)}: FAILED {type(exc).__name__}: {exc}", flush=True)
    else:
        report["rows"].append({**key, **row})
        print(
            f"{label(key)}: {row['tokens_per_s']:.0f} tok/s, {row['wall_s']:.2f} s, "
            f"TPOT p50 {fmt(row['tpot_p50_ms'], '.1f')} ms",
            flush=True,
        )
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# -- report -------------------------------------------------------------------------------------
def fmt(value, spec=".0f") -> str:
    return "-" if value is None else format(value, spec)


def times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def markdown(report: dict) -> str:
    info = report["machine"]
    lines = [
        f"GPU check, {report['date']}: {info['device']}, torch {info['torch']}, transformers "
        f"{info['transformers']}, {report['dtype']}, random weights. Per concurrency N: N "
        f"requests at once, prompts {report['prompt_len']} tokens, {report['max_tokens']} new "
        "tokens each (greedy, ignore_eos). tok/s = output tokens / wall time; ms/token = TPOT "
        "p50 (N=1: batch-1 decode).",
        "",
    ]
    for model in report["models"]:
        rows = [r for r in report["rows"] if r["model"] == model]
        lines += [
            f"**{model}**",
            "",
            "| N | engine tok/s | HF static tok/s | HF generate_batch tok/s | engine / static | "
            "engine / generate_batch | ms/token engine / static / generate_batch |",
            "|---|---|---|---|---|---|---|",
        ]
        for n in report["concurrency"]:
            got = {r["system"]: r for r in rows if r["concurrency"] == n}
            tps = {s: got[s]["tokens_per_s"] if s in got else None for s in SYSTEMS}
            ratio = {
                s: tps["engine"] / tps[s] if tps["engine"] and tps[s] else None
                for s in ("hf_static", "hf_cb")
            }
            tpot = " / ".join(
                fmt(got[s]["tpot_p50_ms"], ".1f") if s in got else "-" for s in SYSTEMS
            )
            lines.append(
                f"| {n} | {fmt(tps['engine'])} | {fmt(tps['hf_static'])} | {fmt(tps['hf_cb'])} | "
                f"{times(ratio['hf_static'])} | {times(ratio['hf_cb'])} | {tpot} |"
            )
        lines.append("")
    wrong = [
        f"{label(r)}: wrong output length for requests {r['wrong_length_requests']}"
        for r in report["rows"]
        if r["wrong_length_requests"]
    ]
    problems = report["skipped"] + report["errors"] + wrong
    lines += [f"- {p}" for p in problems]
    return "\n".join(lines).rstrip() + "\n"


def write(report: dict, out: Path) -> None:
    (out / "gpu_check.json").write_text(json.dumps(report, indent=2))
    (out / "gpu_check.md").write_text(markdown(report))


def device_info(device: torch.device) -> dict:
    """bench.common's machine facts, and the device the check ran on (the GPU's name)."""
    host = machine_info()
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {**host, "device": gpu or host["cpu"] or device.type}


def int_pair(text: str) -> tuple[int, int]:
    lo, hi = (int(x) for x in text.split(","))
    return lo, hi


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--models", default="smollm2-135m,llama-1b")
    parser.add_argument("--concurrency", default="1,16,64,256")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--prompt-len", type=int_pair, default=(16, 256), help="lo,hi tokens")
    parser.add_argument("--max-tokens", type=int_pair, default=(32, 128), help="lo,hi tokens")
    parser.add_argument("--budget-s", type=float, default=300, help="start no row after this")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    if unknown := set(systems) - set(SYSTEMS):
        parser.error(f"--systems: unknown {sorted(unknown)}; choose from {list(SYSTEMS)}")
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    args.out.mkdir(parents=True, exist_ok=True)
    transformers.logging.set_verbosity_error()  # eos_token_id=-1 warns on every generate call
    started = time.monotonic()
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": device_info(device),
        "dtype": args.dtype,
        "models": args.models.split(","),
        "concurrency": [int(n) for n in args.concurrency.split(",")],
        "prompt_len": "-".join(map(str, args.prompt_len)),
        "max_tokens": "-".join(map(str, args.max_tokens)),
        "rows": [],
        "skipped": [],
        "errors": [],
    }
    built = {}  # name -> (model, tokenizer): every model stays on the device (a few GB)
    for name in report["models"]:
        model = random_model(name, device, dtype, seed=args.seed)
        built[name] = model, word_tokenizer(model.config.vocab_size)
    # The engine and static batches first, for every model; generate_batch, the slowest to
    # start (its warm-up captures CUDA graphs), last: the time box cuts it first.
    for phase in (["engine", "hf_static"], ["hf_cb"]):
        for name, (model, tokenizer) in built.items():
            for n in report["concurrency"]:
                requests = make_requests(
                    model.config.vocab_size, n, args.prompt_len, args.max_tokens, args.seed
                )
                for system in [s for s in phase if s in systems]:
                    key = {"model": name, "concurrency": n, "system": system}
                    if time.monotonic() - started > args.budget_s:
                        report["skipped"].append(
                            f"{label(key)}: past the {args.budget_s:.0f} s box"
                        )
                        continue
                    measure(report, key, model, tokenizer, requests, device)
                    write(report, args.out)
    report["elapsed_s"] = time.monotonic() - started
    write(report, args.out)
    print(markdown(report))
    if report["errors"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
