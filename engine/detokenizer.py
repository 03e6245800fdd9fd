"""Incremental detokenization: text deltas for streaming, and stop strings.

The text is always exactly `tokenizer.decode(output_token_ids, skip_special_tokens=...)`
(byte-level BPE pieces of an emoji or a CJK character join up by themselves). With a fast
tokenizer whose decode is the Rust one's alone, each new token goes through tokenizers'
DecodeStream, which decodes a few tokens around it (as vLLM's detokenizer does), not the whole
output again, whose cost grows with every token of every sequence. While a
character's bytes are still arriving, and with any other tokenizer, the whole output is
decoded. Two things are held back from the stream until they settle: trailing U+FFFD (a
character whose bytes have not all arrived) and a tail that could still grow into a stop
string, so a stop string never leaks into a sent delta.
"""

import logging

from tokenizers.decoders import DecodeStream
from transformers.tokenization_utils_base import PreTrainedTokenizerBase
from transformers.tokenization_utils_tokenizers import TokenizersBackend

log = logging.getLogger(__name__)

REPLACEMENT_CHAR = "\ufffd"


def stream_backend(tokenizer):
    """The Rust tokenizer behind `tokenizer` if its decode is that tokenizer's alone (no
    override, no clean-up of spaces), so that streaming it gives the same text; else None."""
    if not isinstance(tokenizer, TokenizersBackend) or tokenizer.clean_up_tokenization_spaces:
        return None
    cls = type(tokenizer)
    if cls._decode is not TokenizersBackend._decode:
        return None
    if cls.decode is not PreTrainedTokenizerBase.decode:
        return None
    return tokenizer.backend_tokenizer


class WholeDecode:
    """`tokenizer.decode(ids, skip_special_tokens=...)`, the whole list every time."""

    def __init__(self, tokenizer, skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens

    def __call__(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)


class StreamedDecode(WholeDecode):
    """`tokenizer.decode(ids, skip_special_tokens=...)` of a list that only grows, fed to a
    DecodeStream token by token. The whole list is decoded while the stream holds tokens back
    (an incomplete character) and for good once the stream fails (tokenizers refuses a decode
    that changed text it already gave)."""

    def __init__(self, tokenizer, backend, skip_special_tokens: bool = True):
        super().__init__(tokenizer, skip_special_tokens)
        self.backend = backend
        self.stream: DecodeStream | None = DecodeStream(skip_special_tokens=skip_special_tokens)
        self.num_fed = 0
        self.text = ""  # the stream's pieces, joined
        self.num_settled = 0  # tokens behind self.text

    def __call__(self, ids: list[int]) -> str:
        if self.stream is not None:
            try:
                for i in range(self.num_fed, len(ids)):
                    piece = self.stream.step(self.backend, ids[i])
                    if piece is not None:
                        self.text += piece
                        self.num_settled = i + 1
                self.num_fed = len(ids)
            except Exception as exc:  # the whole decode below is always right
                log.debug("DecodeStream failed (%s); decoding whole outputs", exc)
                self.stream = None
        if self.stream is not None and self.num_settled == len(ids):
            return self.text
        return super().__call__(ids)


class IncrementalDetokenizer:
    def __init__(
        self,
        tokenizer,
        stop: list[str],
        include_stop_str_in_output: bool,
        skip_special_tokens: bool = True,
        min_tokens: int = 0,
    ):
        self.stop = stop
        self.include_stop_str_in_output = include_stop_str_in_output
        self.min_tokens = min_tokens  # stop strings count only in the text after these
        self.max_stop_len = max((len(s) for s in stop), default=0)
        self.text = ""  # the output so far, cut at a stop string once one is found
        self.num_sent_chars = 0  # of self.text, handed out as deltas
        backend = stream_backend(tokenizer)
        if backend is None:
            self._decode = WholeDecode(tokenizer, skip_special_tokens)
        else:
            self._decode = StreamedDecode(tokenizer, backend, skip_special_tokens)

    def update(self, output_token_ids: list[int]) -> str | None:
        """Decode the output after a new token; return the stop string if the text now has one."""
        old_len = len(self.text.rstrip(REPLACEMENT_CHAR))  # U+FFFD may turn into fewer chars
        self.text = self._decode(output_token_ids)
        if not self.stop or len(output_token_ids) <= self.min_tokens:  # as vLLM's detokenizer
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
