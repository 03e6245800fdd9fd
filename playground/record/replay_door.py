"""What a visitor's replay file may ask of the shared board.

A file from the browser is not trusted more than the visitor who sends it: its requests pass
the public limits (playground/access/limits.py) like the visitor's own prompts, there are at most
MAX_BOARD_REPLAY_REQUESTS of them, and of its engine knobs only those the board's own
controls and presets set are taken (batching, token budget, max sequences, KV blocks, block
size, prefix caching, chunked prefill), within the controls' ranges, on top of the command
line's config. Owners other than the simulated users' ("user:<name>") become REPLAY_OWNER, so
a file cannot write into another visitor's card. A refusal is a FieldError naming the field.
Code (`driver.start_replay`) takes a file as it is.
"""

from dataclasses import replace

from engine import EngineConfig, FieldError
from engine.request_input import tokenize_prompt
from engine.validation import check_int
from playground.access.limits import LimitExceeded, PublicLimits
from playground.record.replay import Replay

MAX_BOARD_REPLAY_REQUESTS = 256
REPLAY_OWNER = "replay"
BOARD_KNOBS = {  # EngineConfig field -> the (low, high) the board's controls allow, or None
    "batching": None,
    "scheduling_policy": None,
    "max_num_batched_tokens": (16, 2048),
    "max_num_seqs": (1, 64),
    "num_kv_blocks": (8, 4096),
    "block_size": (1, 128),
    "enable_prefix_caching": None,
    "enable_chunked_prefill": None,
}


def board_replay(replay: Replay, limits: PublicLimits, tokenizer, base: EngineConfig) -> Replay:
    """`replay` as the board may run it: the board's knobs of the file on `base`, every
    request within `limits` (with the default timeout filled in). FieldError if not."""
    if len(replay.requests) > MAX_BOARD_REPLAY_REQUESTS:
        raise FieldError("requests", f"requests: {len(replay.requests)}; the board replays at "
                                     f"most {MAX_BOARD_REPLAY_REQUESTS}")  # fmt: skip
    knobs = {}
    for name, bounds in BOARD_KNOBS.items():
        value = getattr(replay.config, name)
        if value is None:  # num_kv_blocks sized from memory: the board's own
            continue
        if bounds is not None:
            check_int(f"engine.{name}", value, *bounds)
        knobs[name] = value
    try:
        config = replace(base, **knobs)
    except FieldError as exc:
        raise FieldError(f"engine.{exc.field}", f"engine.{exc}") from None
    requests = []
    for i, r in enumerate(replay.requests):
        where = f"requests[{i}]"
        try:
            _, token_ids = tokenize_prompt(tokenizer, r.prompt)
            params = limits.check(r.params, len(token_ids))
        except LimitExceeded as exc:
            raise FieldError(f"{where}.{exc.field}", f"{where}.{exc}") from None
        except ValueError as exc:
            raise FieldError(f"{where}.prompt", f"{where}.prompt: {exc}") from None
        owner = r.owner if r.owner and r.owner.startswith("user:") else REPLAY_OWNER
        requests.append(replace(r, params=params, owner=owner))
    return replace(replay, config=config, requests=tuple(requests))
