"""The fixed-seed benchmark workload: prompts cut from real English text, sized by token count.

`bench/corpus.txt` is tokenized once; each prompt is a window of exactly `prompt_len` tokens
of that token stream (read cyclically), starting at an offset no other prompt uses, so the
prefix cache finds nothing to share between requests (every request pays its full prefill).
"""

import random
from pathlib import Path

CORPUS = Path(__file__).with_name("corpus.txt")

NUM_REQUESTS = 64
PROMPT_LEN = (20, 300)  # tokens, inclusive
MAX_TOKENS = (16, 256)  # output tokens, inclusive (greedy, ignore_eos: exactly this many)


def corpus_token_ids(tokenizer) -> list[int]:
    return tokenizer(CORPUS.read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"]


def make_workload(
    tokenizer,
    num_requests: int = NUM_REQUESTS,
    seed: int = 0,
    prompt_len: tuple[int, int] = PROMPT_LEN,
    max_tokens: tuple[int, int] = MAX_TOKENS,
) -> list[tuple[list[int], int]]:
    """`num_requests` pairs (prompt_token_ids, max_tokens), the same for the same arguments."""
    ids = corpus_token_ids(tokenizer)
    rng = random.Random(seed)
    if num_requests <= len(ids):
        offsets = rng.sample(range(len(ids)), num_requests)  # distinct: no shared prefixes
    else:
        offsets = [rng.randrange(len(ids)) for _ in range(num_requests)]
    workload = []
    for offset in offsets:
        n = rng.randint(*prompt_len)
        prompt = [ids[(offset + i) % len(ids)] for i in range(n)]
        workload.append((prompt, rng.randint(*max_tokens)))
    return workload


def describe(workload: list[tuple[list[int], int]]) -> str:
    num_prompt = sum(len(p) for p, _ in workload)
    num_output = sum(m for _, m in workload)
    return f"{len(workload)} requests, {num_prompt:,} prompt and {num_output:,} output tokens"
