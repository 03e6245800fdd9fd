"""Latency benchmark: batch-1 decode time per token, the engine against transformers `generate`.

One prompt of --prompt-len tokens (from bench/corpus.txt), greedy, ignore_eos, --max-tokens
output tokens, run alone --iters times after --warmup untimed runs, the systems taking turns
(round-robin). Decode ms/token = (last token - first token) / (tokens - 1); prefill = time to
the first token. Medians. `engine` runs the engine's native forward (model_impl "auto"),
`engine_transformers` the model's transformers modules, `engine_compiled` those modules with
torch_compile=True (compiling takes a minute or two first).

    python bench/bench_latency.py
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/bench_latency.py` from the repo root
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import LogitsProcessorList  # noqa: E402

from bench.common import StepTimes, greedy_config, machine_info  # noqa: E402
from bench.workload import corpus_token_ids  # noqa: E402
from engine import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from engine.loader import load_model  # noqa: E402

SYSTEMS = ("engine", "engine_transformers", "engine_compiled", "engine_hf_cache", "hf_generate")
ENGINE_OVERRIDES = {
    "engine": {},  # model_impl "auto": the native forward for SmolLM2
    "engine_transformers": {"model_impl": "transformers"},  # the model's own modules
    "engine_compiled": {"torch_compile": True},  # compiled when the engine is made
    "engine_hf_cache": {"kv_backend": "hf_cache"},
}


def time_engine(engine: LLMEngine, prompt: list[int], max_tokens: int) -> tuple[float, float]:
    """(prefill s, decode s/token) of one request run alone."""
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    (out,) = engine.generate([prompt], params)
    m = out.metrics
    return m.first_token - m.arrival, m.tpot


@torch.inference_mode()
def time_generate(model, pad_token_id: int, prompt: list[int], max_tokens: int):
    ids = torch.tensor([prompt])  # (1, L)
    timer = StepTimes()
    start = time.perf_counter()
    model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        generation_config=greedy_config(max_tokens, pad_token_id),
        logits_processor=LogitsProcessorList([timer]),
    )
    t = timer.times
    return t[0] - start, (t[-1] - t[0]) / (len(t) - 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"of: {', '.join(SYSTEMS)}")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--output-json", default=None)
    args = parser.parse_args()
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if unknown := [s for s in systems if s not in SYSTEMS]:
        parser.error(f"unknown system(s) {unknown}; choose from {list(SYSTEMS)}")
    if args.max_tokens < 2:
        parser.error("--max-tokens must be >= 2 (decode time needs two tokens)")
    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()

    model, tokenizer = load_model(args.model)
    ids = corpus_token_ids(tokenizer)
    prompt = [ids[i % len(ids)] for i in range(args.prompt_len)]
    runners = {}
    for name in systems:
        if name == "hf_generate":
            runners[name] = lambda: time_generate(
                model, tokenizer.pad_token_id, prompt, args.max_tokens
            )
        else:
            # prefix caching off: every iteration pays its own prefill, as generate does
            config = EngineConfig(enable_prefix_caching=False, **ENGINE_OVERRIDES[name])
            engine = LLMEngine(model, tokenizer, config)
            runners[name] = lambda engine=engine: time_engine(engine, prompt, args.max_tokens)

    for run in runners.values():
        for _ in range(args.warmup):
            run()
    samples = {name: [] for name in runners}
    for _ in range(args.iters):  # round-robin, so a noisy minute hits every system alike
        for name, run in runners.items():
            samples[name].append(run())
    results = {
        name: {
            "prefill_ms": 1e3 * statistics.median(s[0] for s in runs),
            "decode_ms_per_token": 1e3 * statistics.median(s[1] for s in runs),
            "samples": runs,
        }
        for name, runs in samples.items()
    }

    parts = [
        f"{n} {r['decode_ms_per_token']:.1f} ms/token (prefill {r['prefill_ms']:.0f} ms)"
        for n, r in results.items()
    ]
    per_token = {n: r["decode_ms_per_token"] for n, r in results.items()}
    for name in ("engine", "engine_transformers", "engine_compiled"):
        if name in per_token and "hf_generate" in per_token:
            parts.append(f"generate/{name} {per_token['hf_generate'] / per_token[name]:.2f}x")
    print(
        f"batch-1 decode, prompt {args.prompt_len}, {args.max_tokens} tokens: " + ", ".join(parts)
    )
    if args.output_json:
        payload = {"machine": machine_info(), "args": vars(args), "results": results}
        Path(args.output_json).write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
