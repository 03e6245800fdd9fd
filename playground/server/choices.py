"""One HTTP answer from the trackers of its engine requests (several for a batch of prompts).

As vLLM's serving_completion numbers a batch's choices: prompt i's n choices come at
i * n ... i * n + n - 1, all under the one response id, with the usage summed. `echo` puts a
text before each choice's first text (a completion's prompt, a chat's last message).
"""

from playground.server.responses import ResponseTracker


class Choices:
    def __init__(self, response_id: str, trackers: list[ResponseTracker], echoes: list[str]):
        self.response_id = response_id
        self.trackers = trackers
        self.echoes = echoes  # per tracker: the text its choices start with ("" for none)
        self.n = trackers[0].job.params.n  # choices per prompt
        self._echoed: set[int] = set()  # choices whose echo went out

    @property
    def include_usage(self) -> bool:
        return self.trackers[0].job.include_usage

    def chunks(self, i: int, out) -> list[dict]:
        """The stream chunks of tracker i's new output."""
        chunks = self.trackers[i].chunks(out)
        for chunk in chunks:
            self._relabel(i, chunk)
        return chunks

    def usage_chunk(self) -> dict:
        """The last chunk of a stream with include_usage: no choices, the usage."""
        chunk = self.trackers[0].envelope([], usage=self.usage())
        chunk["id"] = self.response_id
        return chunk

    def response(self, lasts: list) -> dict:
        """The non-streamed answer from every tracker's last output (APIError for a failed
        request)."""
        answers = [t.response(out) for t, out in zip(self.trackers, lasts, strict=True)]
        for i, answer in enumerate(answers):
            self._relabel(i, answer)
        whole = answers[0]
        whole["choices"] = [c for answer in answers for c in answer["choices"]]
        whole["usage"] = self.usage()
        return whole

    def usage(self) -> dict:
        usages = [t.usage() for t in self.trackers]
        total = {k: sum(u[k] for u in usages) for k in ("prompt_tokens", "completion_tokens",
                                                         "total_tokens")}  # fmt: skip
        cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
        return {**total, "prompt_tokens_details": {"cached_tokens": cached}}

    def _relabel(self, i: int, obj: dict) -> None:
        """Tracker i's object under the response's id and numbering, echo put in front."""
        obj["id"] = self.response_id
        for choice in obj["choices"]:
            choice["index"] += i * self.n
            if not self.echoes[i] or choice["index"] in self._echoed:
                continue
            self._echoed.add(choice["index"])
            if "text" in choice:
                choice["text"] = self.echoes[i] + choice["text"]
            else:
                part = choice.get("delta") or choice["message"]
                part["content"] = self.echoes[i] + (part["content"] or "")
