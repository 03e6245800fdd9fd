"""A chat answer ends at the chat template's turn markers, as a chat client expects.

A small model often closes its answer and opens the next turn itself ("<|im_start|>user"):
without a stop there, the board's cards would show "user" and "assistant" lines of a turn
nobody asked for. The markers are the tokenizer's special tokens that its chat template
writes around a turn, found by rendering a short conversation (no list per model).

A fixed-length answer (ignore_eos, for the lessons that need exact lengths) must not stop at
them either: it gets min_tokens = max_tokens, so the sampler masks the markers and EOS until
its last token (vLLM's min_tokens), and its length stays exact without a turn in its text.
"""

import functools
from dataclasses import replace

from engine import SamplingParams

_PROBE = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "u"},
    {"role": "assistant", "content": "a"},
]


@functools.cache
def turn_marker_ids(tokenizer) -> tuple[int, ...]:
    """The special token ids the chat template writes around turns; () for a tokenizer
    without a chat template (or without special tokens)."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return ()
    text = tokenizer.apply_chat_template(_PROBE, tokenize=False)
    special = set(getattr(tokenizer, "all_special_ids", ()))
    return tuple(sorted(special & set(tokenizer.encode(text, add_special_tokens=False))))


def stop_at_turns(params: SamplingParams, tokenizer) -> SamplingParams:
    """`params` that also stop at the chat template's turn markers; a fixed-length answer
    (ignore_eos) is kept from writing them until its last token instead; a beam search as
    it is."""
    if params.beam_width > 1:
        return params
    wanted = [t for t in turn_marker_ids(tokenizer) if t not in params.stop_token_ids]
    if not wanted:
        return params
    fixed = {"min_tokens": params.max_tokens} if params.ignore_eos else {}
    return replace(params, stop_token_ids=[*params.stop_token_ids, *wanted], **fixed)
