"""OpenAI's response objects: a validated request ready for the driver (CompletionJob) and the
ResponseTracker that turns its RequestOutputs into completion chunks and bodies."""

from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate

from engine import SamplingParams, StopReason
from playground.server.openai_protocol import FINISH_REASONS, MIN_LOGPROB, APIError


@dataclass(slots=True)
class CompletionJob:
    """A validated request, ready for the driver."""

    chat: bool
    request_id: str
    model: str
    prompt: str | list[int] | list[dict]
    prompt_token_ids: list[int]
    params: SamplingParams
    num_top_logprobs: int | None  # None: no logprobs asked
    priority: int
    stream: bool
    include_usage: bool
    created: int


class ResponseTracker:
    """Turns one request's RequestOutputs into OpenAI objects; remembers what was sent."""

    def __init__(self, job: CompletionJob, decode: Callable[[list[int]], str]):
        self.job = job
        self.decode = decode  # token ids -> text: which stop string ended a completion
        n = job.params.n
        self.num_tokens = [0] * n  # per choice: tokens seen (and logprobs sent)
        self.started = [False] * n
        self.done = [False] * n
        self.text_offset = [0] * n  # completions' logprobs: characters sent so far
        self.num_prompt_tokens = len(job.prompt_token_ids)
        self.num_cached_tokens = 0
        self.finished = False  # the request's last output was seen

    def update(self, out) -> None:
        self.finished |= out.finished
        if out.prompt_token_ids:  # the driver's made-up last outputs have none
            self.num_prompt_tokens = len(out.prompt_token_ids)
            self.num_cached_tokens = out.metrics.num_cached_tokens
        for c in out.outputs:
            self.num_tokens[c.index] = max(self.num_tokens[c.index], len(c.token_ids))

    def usage(self) -> dict:
        completion = sum(self.num_tokens)
        return {
            "prompt_tokens": self.num_prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.num_prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": self.num_cached_tokens},
        }

    def envelope(self, choices: list, usage=None) -> dict:
        job = self.job
        obj = "text_completion"
        if job.chat:
            obj = "chat.completion.chunk" if job.stream else "chat.completion"
        out = {"id": job.request_id, "object": obj, "created": job.created, "model": job.model}
        out["choices"] = choices
        if usage is not None or job.include_usage:  # streamed: null until the last chunk
            out["usage"] = usage
        return out

    def chunks(self, out) -> list[dict]:
        """The stream chunks one RequestOutput adds (one per choice that changed)."""
        first = self.num_tokens[:]
        self.update(out)
        chunks = []
        for c in out.outputs:
            i = c.index
            if self.done[i]:
                continue
            finish = self._finish(c)
            logprobs = self._logprobs(c, first[i])
            if not (c.delta or c.finished or logprobs or not self.started[i]):
                continue
            if self.job.chat:
                delta = {"content": c.delta}
                if not self.started[i]:
                    delta = {"role": "assistant", **delta}
                choice = {"index": i, "delta": delta, "logprobs": logprobs}
            else:
                choice = {"index": i, "text": c.delta, "logprobs": logprobs}
            choice.update(finish)
            self.started[i], self.done[i] = True, c.finished
            chunks.append(self.envelope([choice]))
        return chunks

    def response(self, out) -> dict:
        """The non-streamed answer, from the request's last output."""
        choices = []
        for c in out.outputs:
            if self.job.chat:
                body = {"message": {"role": "assistant", "content": c.text}}
            else:
                body = {"text": c.text}
            body.update(logprobs=self._logprobs(c, 0), **self._finish(c))
            choices.append({"index": c.index, **body})
        return self.envelope(choices, usage=self.usage())

    def _finish(self, c) -> dict:
        """A choice's finish fields: OpenAI's `finish_reason`, vLLM's `stop_reason` (the stop
        string or stop token id that ended it) and the engine's own `engine_stop_reason`.
        APIError 500 for a completion whose forward failed, as vLLM answers its "error"."""
        if c.stop_reason is StopReason.ERROR:
            message = "generating this request failed in the engine (the server log says why)"
            raise APIError(500, message, code="engine_error", type="server_error")
        return {
            "finish_reason": FINISH_REASONS[c.stop_reason] if c.finished else None,
            "stop_reason": self._matched_stop(c),
            "engine_stop_reason": c.stop_reason.value if c.finished else None,
        }

    def _matched_stop(self, c) -> int | str | None:
        """vLLM's `stop_reason`: None unless a stop token or stop string ended the completion."""
        if c.stop_reason is not StopReason.STOP_WORD:
            return None
        params = self.job.params
        if c.token_ids and c.token_ids[-1] in params.stop_token_ids:
            return c.token_ids[-1]
        text = self.decode(c.token_ids)  # the text before it was cut at the stop string
        found = [(text.find(s), i) for i, s in enumerate(params.stop) if s in text]
        return params.stop[min(found)[1]] if found else None

    def _logprobs(self, c, start: int) -> dict | None:
        """Logprobs of the completion's tokens from `start` on, in the route's format."""
        k = self.job.num_top_logprobs
        entries = list(zip(c.token_ids[start:], (c.logprobs or [])[start:], strict=False))
        if k is None or not entries:
            return None
        chosen = [d[tid] for tid, d in entries]
        tops = [top_alternatives(d, k) for _, d in entries]
        if self.job.chat:
            content = [
                {**logprob_entry(lp), "top_logprobs": [logprob_entry(t) for t in top]}
                for lp, top in zip(chosen, tops, strict=True)
            ]
            return {"content": content}
        offsets = list(accumulate((len(lp.decoded_token) for lp in chosen),
                                  initial=self.text_offset[c.index]))  # fmt: skip
        self.text_offset[c.index] = offsets.pop()
        return {
            "tokens": [lp.decoded_token for lp in chosen],
            "token_logprobs": [finite(lp.logprob) for lp in chosen],
            "top_logprobs": [{t.decoded_token: finite(t.logprob) for t in top} for top in tops],
            "text_offset": offsets,
        }


def top_alternatives(d: dict, k: int) -> list:
    """The k most likely of a token's Logprobs (the sampled one comes first in the dict)."""
    return sorted(d.values(), key=lambda lp: lp.rank)[:k]


def logprob_entry(lp) -> dict:
    return {"token": lp.decoded_token, "logprob": finite(lp.logprob),
            "bytes": list(lp.decoded_token.encode("utf-8"))}  # fmt: skip


def finite(logprob: float) -> float:
    """JSON has no -inf (nor NaN): vLLM's floor, -9999.0, for a token the model rules out."""
    return logprob if logprob > MIN_LOGPROB else MIN_LOGPROB
