"""What the engine hands out: RequestOutput, CompletionOutput, RequestMetrics, Logprob."""

from dataclasses import dataclass

from engine.sequence import StopReason


@dataclass(frozen=True, slots=True)
class Logprob:
    logprob: float
    rank: int  # 1 = the model's most likely token
    decoded_token: str


@dataclass(slots=True)
class RequestMetrics:
    arrival: float  # time.monotonic() seconds, like every time below
    first_scheduled: float | None = None
    first_token: float | None = None
    finished: float | None = None
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens found in the prefix cache
    num_generated_tokens: int = 0  # over all n completions
    num_preemptions: int = 0
    num_recomputed_tokens: int = 0  # computed again after preemptions (all completions)
    preemption_time_lost: float = 0.0  # seconds its preemptions delayed it (so far)

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.arrival

    @property
    def e2e(self) -> float | None:
        return None if self.finished is None else self.finished - self.arrival

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first."""
        if self.finished is None or self.first_token is None or self.num_generated_tokens < 2:
            return None
        return (self.finished - self.first_token) / (self.num_generated_tokens - 1)


@dataclass(slots=True)
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    delta: str  # text added since the previous RequestOutput of this request
    stop_reason: StopReason | None
    logprobs: list[dict[int, Logprob]] | None = None  # per token: sampled + top alternatives
    # sum of the tokens' logprobs: a beam's score before the length penalty (None unless
    # beam search or logprobs)
    cumulative_logprob: float | None = None

    @property
    def finished(self) -> bool:
        return self.stop_reason is not None


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics

    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def token_ids(self) -> list[int]:
        return self.outputs[0].token_ids

    @property
    def stop_reason(self) -> StopReason | None:
        return self.outputs[0].stop_reason
