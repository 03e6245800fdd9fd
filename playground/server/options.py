"""How the HTTP API serves: `vllm serve`'s options with its defaults, and the public ones.

Locally the API answers as `vllm serve` does: no per-client in-flight limit
(playground/access/limits.py) and no SSE keep-alive comments unless asked. A public server (a
Space, or --public) keeps the comments on: its proxy closes a stream that says nothing for a
while (a paused board, a long queue).
"""

import math
from dataclasses import dataclass

from engine.sampling_params import MAX_LOGPROBS

PUBLIC_SSE_KEEP_ALIVE_S = 2.0  # a waiting stream on a public server comments this often


@dataclass(frozen=True, slots=True)
class ServingOptions:
    # vLLM's --stream-interval: a streamed chunk waits for this many new tokens (the first and
    # the last go at once); a request's own `stream_interval` may raise it
    stream_interval: int = 1
    # vLLM's --sse-keep-alive-interval: seconds of quiet before a stream sends a comment line;
    # 0 sends none (clients such as `vllm bench serve` cannot read comments)
    sse_keep_alive_interval: float = 0.0
    # unknown request fields: False (vLLM's way) ignores them with a log line naming them,
    # True answers 400 naming the first, as OpenAI does
    strict_request_fields: bool = False
    # vLLM's --generation-config: "auto" (the model's), "vllm" (none) or a folder; the
    # requests' sampling defaults (playground/server/generation_config.py)
    generation_config: str = "auto"
    # vLLM's --max-logprobs: the most logprobs a request may ask for per token (a 400 past it);
    # at most the engine's own cap, which None and vLLM's -1 (no cap) mean
    max_logprobs: int | None = None

    def __post_init__(self):
        if self.max_logprobs in (None, -1):
            object.__setattr__(self, "max_logprobs", MAX_LOGPROBS)
        si = self.stream_interval
        if isinstance(si, bool) or not isinstance(si, int):
            raise TypeError(f"stream_interval must be an int, got {si!r}")
        if si < 1:
            raise ValueError(f"stream_interval must be >= 1, got {si}")
        ka = self.sse_keep_alive_interval
        number = isinstance(ka, int | float) and not isinstance(ka, bool)
        if not number or not math.isfinite(ka) or ka < 0:
            raise ValueError(f"sse_keep_alive_interval must be seconds >= 0, got {ka!r}")
        if not isinstance(self.strict_request_fields, bool):
            raise TypeError(
                f"strict_request_fields must be a bool, got {self.strict_request_fields!r}"
            )
        most = self.max_logprobs
        if isinstance(most, bool) or not isinstance(most, int) or not 0 <= most <= MAX_LOGPROBS:
            raise ValueError(f"max_logprobs must be an int in [0, {MAX_LOGPROBS}], got {most!r}")

    @classmethod
    def defaults(cls, public: bool) -> "ServingOptions":
        """vllm serve's defaults; on a public server, keep-alive comments on."""
        return cls(sse_keep_alive_interval=PUBLIC_SSE_KEEP_ALIVE_S if public else 0.0)
