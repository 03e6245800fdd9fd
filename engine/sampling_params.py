"""SamplingParams: how one request is decoded and when it stops."""

import math
from dataclasses import dataclass, field

from engine.structured_params import StructuredOutputsParams
from engine.validation import FieldError, check_int

MAX_STOP_STRINGS = 64  # each one is searched in every new piece of text
MAX_STOP_STRING_LEN = 256
MAX_N = 16
MAX_BEAM_WIDTH = 16
MAX_TOKENS = 2**31 - 1  # beyond any context window; a request stops at its model's anyway
MAX_LOGPROBS = 20
GREEDY_BELOW = 1e-5  # temperatures under this are greedy
MAX_PENALTY = 2.0  # presence / frequency penalties in [-2, 2], as OpenAI and vLLM


@dataclass(slots=True)
class SamplingParams:
    max_tokens: int = 128
    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0  # > 1 discourages tokens already in prompt or output
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    n: int = 1  # completions of the same prompt; they share its KV blocks
    seed: int | None = None  # same seed -> same tokens, whatever else shares the batch
    logprobs: int | None = None  # top alternatives reported per generated token
    timeout_s: float | None = None  # finish with TIMEOUT this long after arrival
    # beam search (k >= 2): k beams, the n best hypotheses returned, scored as transformers'
    # generate(num_beams=k, do_sample=False): cumulative logprob / generated length ** penalty
    beam_width: int = 1
    length_penalty: float = 1.0
    # vLLM's: EOS and stop_token_ids are masked (and stop strings not searched) until the
    # output has min_tokens tokens
    min_tokens: int = 0
    # OpenAI's, applied as vLLM does: logits minus presence_penalty for each token already in
    # the output, minus frequency_penalty times its count there (> 0 discourages repeats)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    skip_special_tokens: bool = True  # special tokens (EOS, ...) left out of the text
    # the grammar the output follows (engine/structured_output.py); None = free text
    structured_outputs: StructuredOutputsParams | None = None

    def __post_init__(self):
        self.stop = [self.stop] if isinstance(self.stop, str) else _as_list("stop", self.stop)
        self.stop_token_ids = _as_list("stop_token_ids", self.stop_token_ids)
        check_int("max_tokens", self.max_tokens, 1, MAX_TOKENS)
        _check_float("temperature", self.temperature, 0.0, None, "in [0, inf)")
        check_int("top_k", self.top_k, 0)
        _check_float("top_p", self.top_p, 0.0, 1.0, "in (0, 1]")
        if self.top_p == 0.0:
            raise FieldError("top_p", f"top_p must be in (0, 1], got {self.top_p}")
        _check_float("min_p", self.min_p, 0.0, 1.0, "in [0, 1]")
        _check_float("repetition_penalty", self.repetition_penalty, 0.0, None, "in (0, inf)")
        if self.repetition_penalty == 0.0:
            raise FieldError(
                "repetition_penalty", "repetition_penalty must be in (0, inf), got 0.0"
            )
        if len(self.stop) > MAX_STOP_STRINGS:
            raise FieldError(
                "stop", f"stop must hold at most {MAX_STOP_STRINGS} strings, got {len(self.stop)}"
            )
        for s in self.stop:
            if not isinstance(s, str) or not 0 < len(s) <= MAX_STOP_STRING_LEN:
                raise FieldError(
                    "stop",
                    f"stop strings must be non-empty str of at most {MAX_STOP_STRING_LEN} "
                    f"characters, got {s!r:.80}",
                )
        for t in self.stop_token_ids:
            check_int("stop_token_ids", t, 0)
        for name in ("ignore_eos", "include_stop_str_in_output", "skip_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise FieldError(name, f"{name} must be a bool, got {getattr(self, name)!r}")
        check_int("n", self.n, 1, MAX_N)
        if self.seed is not None:
            check_int("seed", self.seed, 0, 2**63 - 1)
        if self.logprobs is not None:
            check_int("logprobs", self.logprobs, 0, MAX_LOGPROBS)
        if self.timeout_s is not None:
            _check_float("timeout_s", self.timeout_s, 0.0, None, "> 0")
            if self.timeout_s == 0.0:
                raise FieldError("timeout_s", "timeout_s must be > 0, got 0.0")
        self._check_vllm_extensions()
        check_int("beam_width", self.beam_width, 1, MAX_BEAM_WIDTH)
        _check_float("length_penalty", self.length_penalty, -math.inf, None, "")
        if self.use_beam_search:
            self._check_beam_search()
        elif self.length_penalty != 1.0:
            raise FieldError(
                "length_penalty",
                f"length_penalty only applies to beam search (beam_width >= 2), got "
                f"{self.length_penalty} with beam_width=1",
            )
        elif self.is_greedy and self.n > 1:  # vLLM's SamplingParams._verify_greedy_sampling
            raise FieldError("n", f"n must be 1 when using greedy sampling, got {self.n}")

    def _check_vllm_extensions(self) -> None:
        check_int("min_tokens", self.min_tokens, 0, self.max_tokens)
        for name in ("presence_penalty", "frequency_penalty"):
            _check_float(name, getattr(self, name), -MAX_PENALTY, MAX_PENALTY, "in [-2, 2]")
        so = self.structured_outputs
        if isinstance(so, dict):
            unknown = sorted(set(so) - set(StructuredOutputsParams.__dataclass_fields__))
            if unknown:
                raise FieldError(
                    "structured_outputs", f"structured_outputs has no field {unknown[0]!r}"
                )
            self.structured_outputs = so = StructuredOutputsParams(**so)
        if so is not None and not isinstance(so, StructuredOutputsParams):
            raise FieldError(
                "structured_outputs",
                f"structured_outputs must be a StructuredOutputsParams or a dict, got {so!r:.80}",
            )

    def _check_beam_search(self) -> None:
        """Beams are deterministic: refuse the fields that would sample or cannot apply."""
        k = self.beam_width
        if self.n > k:
            raise FieldError("n", f"n must be <= beam_width ({k}) with beam search, got {self.n}")
        if self.temperature != 0.0:
            raise FieldError(
                "temperature", f"temperature must be 0 with beam search, got {self.temperature}"
            )
        unused = {
            "top_k": (self.top_k, 0), "top_p": (self.top_p, 1.0), "min_p": (self.min_p, 0.0),
            "seed": (self.seed, None), "repetition_penalty": (self.repetition_penalty, 1.0),
            "logprobs": (self.logprobs, None), "stop": (self.stop, []),
            "stop_token_ids": (self.stop_token_ids, []), "min_tokens": (self.min_tokens, 0),
            "presence_penalty": (self.presence_penalty, 0.0),
            "frequency_penalty": (self.frequency_penalty, 0.0),
            "structured_outputs": (self.structured_outputs, None),
        }  # fmt: skip
        for name, (value, default) in unused.items():
            if value != default:
                raise FieldError(
                    name,
                    f"{name} is not supported with beam search (beam_width={k}): leave it at "
                    f"{default!r}, got {value!r:.80}",
                )

    @property
    def use_beam_search(self) -> bool:
        return self.beam_width > 1

    @property
    def num_seqs(self) -> int:
        """Sequences that decode the request at once: its beams, or its n completions."""
        return self.beam_width if self.use_beam_search else self.n

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW  # tinier ones overflow logits / temperature


def _check_float(name: str, value, low: float, high: float | None, rng: str) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < low or (high is not None and value > high):
        rng = f" {rng}" if rng else ""
        raise FieldError(name, f"{name} must be a finite number{rng}, got {value!r}")


def _as_list(name: str, value) -> list:
    """None -> [], a list or tuple -> a new list (items are checked by the caller)."""
    if value is None:
        return []
    if not isinstance(value, list | tuple):
        raise FieldError(name, f"{name} must be a list, got {value!r:.80}")
    return list(value)
