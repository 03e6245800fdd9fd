"""Requests as the playground sees them: the stream handle, the ledger record, refusals."""

import queue
import time
from dataclasses import dataclass

from engine import CompletionOutput, RequestMetrics, RequestOutput, StopReason


class RequestRejected(ValueError):
    """add_request refused the request (the message names the field)."""


class RequestHandle:
    """The stream of one request: RequestOutputs in order, the last one with finished=True."""

    def __init__(self, request_id: str, owner: str | None):
        self.request_id = request_id
        self.owner = owner
        self._queue: queue.Queue = queue.Queue()

    def get(self, timeout: float | None = None) -> RequestOutput:
        """Next output; raises queue.Empty after timeout, RequestRejected if refused."""
        item = self._queue.get(timeout=timeout)
        if isinstance(item, BaseException):
            raise item
        return item

    def get_nowait(self) -> RequestOutput | None:
        try:
            return self.get(timeout=0) if not self._queue.empty() else None
        except queue.Empty:
            return None

    def __iter__(self):
        while True:
            out = self.get()
            yield out
            if out.finished:
                return

    def result(self, timeout: float | None = None) -> RequestOutput:
        """Block until the request finishes; return its last output."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            out = self.get(timeout=left)
            if out.finished:
                return out


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """The ledger's view of one request (first lane), replaced on every output."""

    request_id: str
    owner: str | None  # "user:<name>", "visitor:<session>", "api", ...
    prompt: str  # printable preview
    submitted: float  # time.monotonic()
    text: str = ""
    num_output_tokens: int = 0
    stop_reason: str | None = None
    finished: bool = False
    error: str | None = None  # why add_request refused it, or why its step failed
    token_ids: tuple[int, ...] | None = None  # kept only when logprobs were asked
    logprobs: tuple | None = None  # per token dict[token_id -> Logprob]
    ttft: float | None = None


def preview(prompt, limit: int = 300) -> str:
    if isinstance(prompt, str):
        text = prompt
    elif prompt and isinstance(prompt[0], dict):  # chat messages: the last user turn
        users = [m.get("content", "") for m in prompt if m.get("role") == "user"]
        text = str(users[-1] if users else prompt[-1].get("content", ""))
        if any(m.get("role") == "system" for m in prompt):
            text = "[system prompt] " + text
    else:
        text = f"<{len(prompt)} token ids>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def final_output(request_id: str, text: str, reason: StopReason) -> RequestOutput:
    """A last output made by the driver (the engine was reset, or its step failed)."""
    now = time.monotonic()
    completion = CompletionOutput(0, text, [], "", reason)
    metrics = RequestMetrics(now, finished=now)
    return RequestOutput(request_id, None, [], [completion], True, metrics)
