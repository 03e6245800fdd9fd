"""Request intake: the checks a request passes before it is queued, each naming its field.

`add_request` runs them in this order, and queues nothing when one fails: the request's own
fields (`check_request`), the queue's room (`QueueFullError`), then, once the prompt is
tokenized, whether it fits the context window, the KV pool and the token budget
(`check_fits`)."""

from engine.config import EngineConfig
from engine.sampling_params import SamplingParams
from engine.validation import FieldError


class QueueFullError(ValueError):
    """add_request refused a request because max_waiting requests already wait."""


def check_request(
    config: EngineConfig, request_id, live: dict, params: SamplingParams | None, priority
) -> SamplingParams:
    """The request's own fields against the engine's config; returns its params (the
    defaults for None). `live` holds the ids of the requests in flight."""
    if not isinstance(request_id, str) or not request_id:
        raise ValueError(f"request_id must be a non-empty str, got {request_id!r}")
    if request_id in live:
        raise ValueError(f"request_id {request_id!r} is already in flight")
    params = SamplingParams() if params is None else params
    if not isinstance(params, SamplingParams):
        raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise FieldError("priority", f"priority must be an int, got {priority!r}")
    if priority != 0 and config.scheduling_policy != "priority":
        raise FieldError(
            "priority",
            f"priority {priority} needs scheduling_policy='priority' (this engine runs "
            f"{config.scheduling_policy!r})",
        )
    name = "beam_width" if params.use_beam_search else "n"
    if params.num_seqs > config.max_num_seqs:  # all of them decode in one batch
        raise FieldError(
            name,
            f"{name} must be an integer in [1, {config.max_num_seqs}] (at most "
            f"max_num_seqs={config.max_num_seqs}), got {params.num_seqs}",
        )
    if params.use_beam_search and config.kv_backend != "paged":
        raise FieldError(
            "beam_width",
            f"beam_width > 1 (beam search) needs kv_backend='paged', where beams share KV "
            f"blocks; this engine runs {config.kv_backend!r}",
        )
    return params


def check_room(config: EngineConfig, num_waiting: int) -> None:
    if config.max_waiting is not None and num_waiting >= config.max_waiting:
        raise QueueFullError(
            f"the waiting queue is full (max_waiting={config.max_waiting}); retry later"
        )


def check_fits(config: EngineConfig, token_ids: list[int], params: SamplingParams) -> None:
    """The tokenized prompt against the context window, the KV pool and the token budget."""
    c = config
    if params.use_beam_search:  # preempted beams are recomputed each with its own blocks
        length = min(len(token_ids) + params.max_tokens, c.max_model_len)
        needed = params.beam_width * -(-length // c.block_size)
        if needed > c.num_kv_blocks:
            raise FieldError(
                "beam_width",
                f"beam_width={params.beam_width} with a {len(token_ids)}-token prompt and "
                f"max_tokens={params.max_tokens} may need {needed} KV blocks (every beam "
                f"recomputed on its own after a preemption); the pool has "
                f"{c.num_kv_blocks}: use fewer beams or tokens",
            )
    if len(token_ids) >= c.max_model_len:
        raise ValueError(
            f"prompt has {len(token_ids)} tokens; max_model_len is {c.max_model_len} (the "
            f"model's context window, capped by the KV pool of {c.num_kv_blocks} blocks x "
            f"{c.block_size} tokens) and at least one token must be left to generate"
        )
    if not c.enable_chunked_prefill and len(token_ids) > c.max_num_batched_tokens:
        raise ValueError(
            f"prompt has {len(token_ids)} tokens, more than max_num_batched_tokens "
            f"({c.max_num_batched_tokens}) with chunked prefill off"
        )


def eos_token_ids(model, tokenizer) -> frozenset[int]:
    """The ids that end a sequence: the generation config's and the tokenizer's."""
    ids = set()
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (gen_eos, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(value)
    return frozenset(ids)
