"""Incremental detokenization: text deltas for streaming, and stop strings.

Every update decodes the whole output again, so the text is always exactly
`tokenizer.decode(output_token_ids, skip_special_tokens=True)` (byte-level BPE pieces of an
emoji or a CJK character join up by themselves). Two things are held back from the stream
until they settle: trailing U+FFFD (a character whose bytes have not all arrived) and a tail
that could still grow into a stop string, so a stop string never leaks into a sent delta.
"""

REPLACEMENT_CHAR = "\ufffd"


class IncrementalDetokenizer:
    def __init__(self, tokenizer, stop: list[str], include_stop_str_in_output: bool):
        self.tokenizer = tokenizer
        self.stop = stop
        self.include_stop_str_in_output = include_stop_str_in_output
        self.max_stop_len = max((len(s) for s in stop), default=0)
        self.text = ""  # the output so far, cut at a stop string once one is found
        self.num_sent_chars = 0  # of self.text, handed out as deltas

    def update(self, output_token_ids: list[int]) -> str | None:
        """Decode the output after a new token; return the stop string if the text now has one."""
        old_len = len(self.text.rstrip(REPLACEMENT_CHAR))  # U+FFFD may turn into fewer chars
        self.text = self.tokenizer.decode(output_token_ids, skip_special_tokens=True)
        if not self.stop:
            return None
        # A stop string may start in text we already searched: look back max_stop_len - 1.
        search_from = max(0, min(old_len, len(self.text)) - self.max_stop_len + 1)
        found, found_at = None, len(self.text)
        for s in self.stop:
            i = self.text.find(s, search_from)
            if 0 <= i < found_at:
                found, found_at = s, i
        if found is not None:
            end = found_at + len(found) if self.include_stop_str_in_output else found_at
            self.text = self.text[:end]
        return found

    def take_delta(self, finished: bool) -> str:
        """The text not yet sent, minus what may still change (unless the sequence finished)."""
        end = len(self.text) if finished else len(self.text) - self._num_unsettled_chars()
        if end <= self.num_sent_chars:
            return ""
        delta = self.text[self.num_sent_chars : end]
        self.num_sent_chars = end
        return delta

    @property
    def sent_text(self) -> str:
        return self.text[: self.num_sent_chars]

    def _num_unsettled_chars(self) -> int:
        text = self.text
        n = len(text) - len(text.rstrip(REPLACEMENT_CHAR))
        # Longest tail of the settled text that is the start of some stop string.
        settled = text[: len(text) - n]
        for k in range(min(len(settled), self.max_stop_len - 1), 0, -1):
            tail = settled[-k:]
            if any(s.startswith(tail) for s in self.stop):
                return n + k
        return n
