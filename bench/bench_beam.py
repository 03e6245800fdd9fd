"""Beam search benchmark: the engine against transformers `generate(num_beams=k)`, one process.

--num-prompts prompts from bench/corpus.txt (--prompt-len tokens each), beam search with
--beams beams and the best one returned, --max-tokens new tokens. The engine runs them all at
once (its beams forked and batched with the other requests' beams); transformers runs one
`generate(num_beams=k, do_sample=False)` per prompt, as a caller without a server would. Both
count the tokens of the returned sequences; the engine's outputs are also checked against
transformers' (the same sequences, or a near-tie of equal scores).

    python bench/bench_beam.py --output-json bench/results_beam.json
"""

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/bench_beam.py` from the repo root
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from transformers import GenerationConfig  # noqa: E402

from bench.common import machine_info  # noqa: E402
from bench.workload import corpus_token_ids  # noqa: E402
from engine import EngineConfig, LLMEngine, SamplingParams  # noqa: E402
from engine.loader import load_model  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-prompts", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--beams", type=int, default=4)
    p.add_argument("--output-json", default=None)
    return p.parse_args(argv)


@torch.inference_mode()
def run_generate(model, prompts, args, eos) -> tuple[list[list[int]], float]:
    config = GenerationConfig(
        max_new_tokens=args.max_tokens, do_sample=False, num_beams=args.beams,
        eos_token_id=eos, pad_token_id=eos[0],
    )  # fmt: skip
    outs, start = [], time.perf_counter()
    for prompt in prompts:
        row = model.generate(torch.tensor([prompt]), generation_config=config)[0, len(prompt) :]
        row = row.tolist()
        outs.append(row[: next((i + 1 for i, t in enumerate(row) if t in eos), len(row))])
    return outs, time.perf_counter() - start


def run_engine(engine: LLMEngine, prompts, args) -> tuple[list[list[int]], float]:
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, beam_width=args.beams)
    start = time.perf_counter()
    outs = engine.generate(prompts, params)
    return [o.token_ids for o in outs], time.perf_counter() - start


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(0)
    model, tokenizer = load_model("default")
    corpus = corpus_token_ids(tokenizer)
    prompts = [
        corpus[i * args.prompt_len : (i + 1) * args.prompt_len] for i in range(args.num_prompts)
    ]
    config = EngineConfig(max_num_seqs=max(32, args.beams), max_num_batched_tokens=512)
    engine = LLMEngine(model, tokenizer, config, seed=0)
    eos = sorted(engine.eos_token_ids)
    run_engine(engine, prompts[:1], args)  # warm-up
    mine, engine_s = run_engine(engine, prompts, args)
    ref, generate_s = run_generate(model, prompts, args, eos)
    equal = sum(a == b for a, b in zip(mine, ref, strict=True))
    result = {
        "machine": machine_info(),
        "args": vars(args),
        "engine_tokens_per_s": sum(map(len, mine)) / engine_s,
        "generate_tokens_per_s": sum(map(len, ref)) / generate_s,
        "engine_s": engine_s,
        "generate_s": generate_s,
        "num_equal": equal,
    }
    print(
        f"beam search, {args.beams} beams, {args.num_prompts} prompts x {args.prompt_len} "
        f"tokens, {args.max_tokens} new: engine {result['engine_tokens_per_s']:.1f} tok/s, "
        f"transformers generate {result['generate_tokens_per_s']:.1f} tok/s "
        f"({result['engine_tokens_per_s'] / result['generate_tokens_per_s']:.2f}x); "
        f"{equal}/{args.num_prompts} sequences equal"
    )
    if args.output_json:
        Path(args.output_json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
