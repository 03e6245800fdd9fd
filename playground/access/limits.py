"""What one visitor may ask of the shared engine through the public doors (board and HTTP API).

The engine's own checks (SamplingParams, EngineConfig.max_waiting, the context window) keep
it correct; these limits keep one visitor from taking a small shared CPU away from everybody
else, and vLLM's admission limit (`max_num_queued_reqs`) keeps the queue bounded. Simulated
users are not subject to them. Defaults suit a 2-vCPU Space; `app.py` flags change them.
"""

import math
from dataclasses import dataclass, replace

from engine import SamplingParams
from engine.validation import check_int
from playground.handles import RequestRejected

PUBLIC_MAX_IN_FLIGHT = 4  # unfinished requests per visitor on a public server
PUBLIC_MAX_NUM_QUEUED_REQS = 1024  # sequences in flight on a public server, every owner's
# vLLM's QueueOverflowError's text (vllm/exceptions.py), which its server answers with
QUEUE_OVERFLOW_MESSAGE = (
    "The engine is currently busy and cannot accept new requests. Please try again later or "
    "on a different instance."
)


COUNTS = (  # PublicLimits' integer fields: (name, lowest value, None allowed: no limit)
    ("max_prompt_tokens", 1, False), ("max_tokens", 1, False), ("max_n", 1, False),
    ("max_in_flight", 1, True), ("max_num_queued_reqs", 0, True),  # vLLM's 0 admits nothing
)  # fmt: skip


class LimitExceeded(RequestRejected):
    """A request past a public limit (code "limit_exceeded"); `message` is the text after the
    field's name, for a door that calls the field something else."""

    def __init__(self, field: str, message: str, status: int = 400):
        super().__init__(f"{field}: {message}", field, status, code="limit_exceeded")
        self.message = message


@dataclass(frozen=True, slots=True)
class PublicLimits:
    max_prompt_tokens: int = 2048
    max_tokens: int = 512
    max_n: int = 4
    # unfinished requests per visitor (browser session, API client); None: no limit
    max_in_flight: int | None = None
    default_timeout_s: float | None = 300.0  # for requests that set none; None = never
    # vLLM's --max-num-queued-reqs: a request is refused (HTTP 503) when the unfinished
    # requests (waiting + running; one of n completions or beams counts n) and its own would
    # pass it; None: no limit, vLLM's default
    max_num_queued_reqs: int | None = None

    def __post_init__(self):
        for name, low, optional in COUNTS:
            value = getattr(self, name)
            if not (optional and value is None):
                check_int(name, value, low)
        t = self.default_timeout_s
        if t is not None and (
            isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t <= 0
        ):
            raise ValueError(f"default_timeout_s must be a number > 0 or None, got {t!r}")

    @classmethod
    def defaults(cls, public: bool) -> "PublicLimits":
        """vllm serve's defaults; on a public server, at most PUBLIC_MAX_IN_FLIGHT per visitor
        and PUBLIC_MAX_NUM_QUEUED_REQS in all."""
        if not public:
            return cls()
        return cls(max_in_flight=PUBLIC_MAX_IN_FLIGHT,
                   max_num_queued_reqs=PUBLIC_MAX_NUM_QUEUED_REQS)  # fmt: skip

    def check(self, params: SamplingParams, num_prompt_tokens: int) -> SamplingParams:
        """`params` with the default timeout filled in; LimitExceeded past a limit."""
        if num_prompt_tokens > self.max_prompt_tokens:
            raise LimitExceeded(
                "prompt",
                f"{num_prompt_tokens} tokens; this playground takes at most "
                f"{self.max_prompt_tokens}",
            )
        if params.max_tokens > self.max_tokens:
            allowed = f"this playground allows at most {self.max_tokens}"
            raise LimitExceeded("max_tokens", f"{params.max_tokens}; {allowed}")
        if params.n > self.max_n:
            raise LimitExceeded("n", f"{params.n}; this playground allows at most {self.max_n}")
        if params.beam_width > self.max_n:  # a beam costs what a completion does
            raise LimitExceeded(
                "beam_width", f"{params.beam_width}; this playground allows at most {self.max_n}"
            )
        if params.timeout_s is None and self.default_timeout_s is not None:
            params = replace(params, timeout_s=float(self.default_timeout_s))
        return params


def in_flight_error(in_flight: int, max_in_flight: int) -> LimitExceeded:
    """The refusal of one request too many in flight (HTTP 429)."""
    return LimitExceeded(
        "requests",
        f"you already have {in_flight} unfinished (at most {max_in_flight} at a time); "
        "wait for one to finish or cancel it",
        status=429,
    )


def queue_overflow_error() -> RequestRejected:
    """vLLM's admission refusal (check_admission, vllm/v1/engine/async_llm.py): HTTP 503, so
    load balancers and client SDKs retry, on another instance if there is one."""
    return RequestRejected(QUEUE_OVERFLOW_MESSAGE, "requests", status=503, code="queue_full")
