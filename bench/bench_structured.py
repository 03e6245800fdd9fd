"""Structured outputs: what the grammar mask adds to the sampler per step.

The sampler alone (no model), the real tokenizer's 49,152-token vocabulary, random logits
(the mask's cost does not depend on what the model says). Every row follows the same JSON
schema (a nested object with an enum and a bounded array), temperature 1; a row whose
grammar completes starts again. Each round times --steps sampler calls with the grammar and
--steps without it, taking turns; the cost per step is the median difference, at each batch
size. Times are the CPU time of the calling thread with one torch thread (everything here
runs on it), so that neighbours on a shared machine do not count; --wall for wall time.

    python bench/bench_structured.py
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/bench_structured.py` from the repo root
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from engine.detokenizer import IncrementalDetokenizer  # noqa: E402
from engine.loader import load_model  # noqa: E402
from engine.sampler import Sampler  # noqa: E402
from engine.sampling_params import SamplingParams  # noqa: E402
from engine.sequence import Sequence, SequenceStatus  # noqa: E402
from engine.structured_output import GrammarState, compile_grammar  # noqa: E402

VOCAB = 49152
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "address": {"type": "object", "properties": {"city": {"type": "string"},
                    "zip": {"type": "integer"}}, "required": ["city", "zip"]},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 4},
    },
    "required": ["name", "address", "role", "tags"],
}  # fmt: skip


def make_seqs(tokenizer, batch: int, structured: bool) -> list[Sequence]:
    so = {"json": SCHEMA} if structured else None
    params = SamplingParams(max_tokens=10**6, structured_outputs=so)
    seqs = []
    for i in range(batch):
        grammar = None
        if structured:
            grammar = GrammarState(compile_grammar(tokenizer, VOCAB, params.structured_outputs))
        detok = IncrementalDetokenizer(tokenizer, [], False)
        seq = Sequence(i, 0, [1, 2, 3], params, detok, frozenset({2}), 10**6, grammar=grammar)
        seq.set_status(SequenceStatus.RUNNING)
        seqs.append(seq)
    return seqs


def run(sampler, seqs, logits, steps: int, clock=time.thread_time) -> float:
    """Seconds per sampler call; each sampled token is accepted (a completed grammar resets)."""
    start = clock()
    for _ in range(steps):
        for seq, (token, _) in zip(seqs, sampler(logits, seqs), strict=True):
            seq.output_token_ids.append(token)
            if seq.grammar is not None:
                seq.grammar.advance(seq.output_token_ids)
                if seq.grammar.is_terminated:
                    seq.output_token_ids = []
                    seq.grammar.matcher.reset()
                    seq.grammar.num_accepted = 0
    return (clock() - start) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--wall", action="store_true", help="wall time, not thread CPU time")
    ap.add_argument("--output-json", type=Path)
    args = ap.parse_args()
    clock = time.perf_counter if args.wall else time.thread_time
    if not args.wall:
        torch.set_num_threads(1)
    torch.manual_seed(0)
    _, tokenizer = load_model("default")
    results = {}
    for batch in args.batch:
        logits = torch.randn(batch, VOCAB) * 3
        sampler = Sampler(tokenizer, seed=0)
        plain, structured = make_seqs(tokenizer, batch, False), make_seqs(tokenizer, batch, True)
        run(sampler, structured, logits, 3)  # warm-up
        times = {"plain": [], "structured": []}
        for _ in range(args.rounds):
            times["plain"].append(run(sampler, plain, logits, args.steps, clock))
            times["structured"].append(run(sampler, structured, logits, args.steps, clock))
        ms = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        added = statistics.median(s - p for s, p in zip(times["structured"], times["plain"],
                                                        strict=True)) * 1e3  # fmt: skip
        results[batch] = {**ms, "added": added}
        print(f"batch {batch:3d}: sampler {ms['plain']:.2f} ms/step, with the grammar mask "
              f"{ms['structured']:.2f} ms/step (+{added:.2f} ms)", flush=True)  # fmt: skip
    if args.output_json:
        args.output_json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
