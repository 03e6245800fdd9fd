"""IncrementalDetokenizer with the real SmolLM2 tokenizer: deltas, U+FFFD, stop strings.

Each test feeds a string's token ids one at a time, as the engine does (update after every
token, then take a delta), and checks the stream against `tokenizer.decode`.
"""

import copy
import random

import pytest

from engine.detokenizer import (
    REPLACEMENT_CHAR,
    IncrementalDetokenizer,
    StreamedDecode,
    stream_backend,
)


@pytest.fixture(scope="module")
def tok(default_model):
    return default_model[1]


class Stream:
    """What a client would see: the deltas, and when the stop string was found."""

    def __init__(self, tok, text_or_ids, stop=(), include_stop_str_in_output=False, finish=True):
        ids = tok.encode(text_or_ids) if isinstance(text_or_ids, str) else text_or_ids
        self.det = IncrementalDetokenizer(tok, list(stop), include_stop_str_in_output)
        self.deltas: list[str] = []
        self.sent_after: list[str] = []  # sent_text after each delta
        self.found = None
        self.num_fed = 0
        for i in range(1, len(ids) + 1):
            self.found = self.det.update(ids[:i])
            self.num_fed = i
            done = self.found is not None or (finish and i == len(ids))
            self.deltas.append(self.det.take_delta(done))
            self.sent_after.append(self.det.sent_text)
            if self.found is not None:
                break
        self.ids = ids[: self.num_fed]

    @property
    def joined(self) -> str:
        return "".join(self.deltas)

    @property
    def sent_before_stop(self) -> str:
        """Everything handed out before the step that found the stop string."""
        return "".join(self.deltas[:-1])


TEXTS = [
    "Hello, world! How are you today?",
    "👍🏽🎉",
    "你好，世界",
    "mix: 你好 👍🏽 ok 🎉 done",
    "日本語のテキスト",
    "naïve café, résumé",
]


@pytest.mark.parametrize("text", TEXTS)
def test_deltas_join_to_decode(tok, text):
    s = Stream(tok, text)
    expected = tok.decode(s.ids, skip_special_tokens=True)
    assert expected == text  # the tokenizer round-trips these strings
    assert s.found is None
    assert s.joined == s.det.text == expected
    assert s.det.sent_text == expected


@pytest.mark.parametrize("text", TEXTS)
def test_no_delta_holds_a_replacement_char(tok, text):
    s = Stream(tok, text)
    for d in s.deltas:
        assert REPLACEMENT_CHAR not in d, (text, s.deltas)


@pytest.mark.parametrize("text", TEXTS)
def test_sent_text_only_grows_as_a_prefix(tok, text):
    s = Stream(tok, text)
    for before, after in zip(s.sent_after, s.sent_after[1:], strict=False):
        assert after.startswith(before)
    for sent in s.sent_after:
        assert text.startswith(sent)


def test_emoji_bytes_are_held_until_complete(tok):
    ids = tok.encode("party 🎉 time")
    det = IncrementalDetokenizer(tok, [], False)
    det.update(ids[:2])  # "party " + first byte of the emoji
    assert det.text.endswith(REPLACEMENT_CHAR)
    assert det.take_delta(False) == "party "  # the space is settled, the byte is not
    det.update(ids[:3])
    assert det.take_delta(False) == ""
    det.update(ids[:4])
    assert det.take_delta(False) == "🎉"
    det.update(ids)
    assert det.take_delta(True) == " time"
    assert det.take_delta(True) == ""


def test_finish_mid_character_releases_what_decode_gives(tok):
    ids = tok.encode("👍🏽🎉")[:2]  # stopped (say max_tokens) inside the first emoji
    s = Stream(tok, ids)
    assert s.joined == tok.decode(ids, skip_special_tokens=True) == s.det.text


def test_eos_is_not_text(tok):
    ids = [*tok.encode("Hi there"), tok.eos_token_id]
    s = Stream(tok, ids)
    assert s.joined == s.det.text == "Hi there"


def test_without_finish_nothing_unsettled_is_sent(tok):
    s = Stream(tok, "He said 👍🏽", finish=False)
    assert s.det.text == "He said 👍🏽"
    assert s.joined == "He said 👍🏽"  # nothing was unsettled at the end
    partial = Stream(tok, tok.encode("He said 👍🏽")[:-1], finish=False)
    assert partial.det.text == "He said 👍" + REPLACEMENT_CHAR  # skin tone half there
    assert partial.joined == "He said 👍"


# -- stop strings ---------------------------------------------------------------------------
def check_no_leak(s: Stream, stop: str, include: bool):
    """Nothing of the stop string was sent before it was found; the stream equals the text."""
    text = s.det.text
    assert s.joined == text
    if include:
        assert text.endswith(stop)
        before_stop = text[: len(text) - len(stop)]
    else:
        assert stop not in text
        before_stop = text
    assert before_stop.startswith(s.sent_before_stop)
    assert stop not in s.sent_before_stop


@pytest.mark.parametrize("include", [False, True])
def test_stop_string_spanning_tokens(tok, include):
    text = "The answer is forty two. Done here"
    s = Stream(tok, text, stop=["forty two"], include_stop_str_in_output=include)
    assert s.found == "forty two"
    assert s.num_fed == 5  # found on the token " two", not later
    assert s.det.text == ("The answer is forty two" if include else "The answer is ")
    check_no_leak(s, "forty two", include)
    assert s.sent_before_stop == "The answer is "  # " forty" was held back, not sent


@pytest.mark.parametrize("include", [False, True])
def test_stop_string_ending_inside_a_token(tok, include):
    s = Stream(
        tok, "The answer is forty two.", stop=["answer is fo"], include_stop_str_in_output=include
    )
    assert s.found == "answer is fo"
    assert s.det.text == ("The answer is fo" if include else "The ")
    check_no_leak(s, "answer is fo", include)


def test_stop_string_inside_one_token(tok):
    s = Stream(tok, "a b c END d", stop=["END"])
    assert s.found == "END" and s.num_fed == 4
    assert s.det.text == "a b c "
    check_no_leak(s, "END", False)


def test_earliest_stop_string_wins(tok):
    text = "Hello, world! How are you today?"
    s = Stream(tok, text, stop=["today", "How are", "world"])
    assert s.found == "world" and s.det.text == "Hello, "
    check_no_leak(s, "world", False)


def test_first_of_two_occurrences(tok):
    s = Stream(tok, "go go go", stop=["go"], include_stop_str_in_output=True)
    assert s.found == "go" and s.det.text == "go"


@pytest.mark.parametrize(
    ("text", "stop", "cut"),
    [
        ("你好，世界再见", "世界", "你好，"),
        ("你好，世界再见", "界", "你好，世"),
        ("party 🎉 time", "🎉", "party "),
        ("mix: 你好 👍🏽 ok 🎉 done", "👍🏽 ok", "mix: 你好 "),
        ("mix: 你好 👍🏽 ok 🎉 done", "ok 🎉", "mix: 你好 👍🏽 "),
    ],
)
@pytest.mark.parametrize("include", [False, True])
def test_multibyte_stop_string(tok, text, stop, cut, include):
    s = Stream(tok, text, stop=[stop], include_stop_str_in_output=include)
    assert s.found == stop, f"stop {stop!r} not found in {s.det.text!r}"
    assert s.det.text == (cut + stop if include else cut)
    check_no_leak(s, stop, include)
    for d in s.deltas:
        assert REPLACEMENT_CHAR not in d


def test_held_back_tail_released_when_finished_without_stop(tok):
    text = "He said forty"
    s = Stream(tok, text, stop=["forty-two"], finish=False)
    assert s.found is None
    assert s.det.text == text
    assert s.joined == "He said "  # "forty" could still become the stop string
    assert s.det.take_delta(True) == "forty"
    assert s.det.sent_text == text


def test_held_back_tail_released_when_it_stops_matching(tok):
    s = Stream(tok, "He said forty two", stop=["forty-two"], finish=False)
    assert s.found is None
    assert s.joined == "He said forty two"


def test_stream_finishing_without_stop_string_gives_full_text(tok):
    text = "The answer is forty"
    s = Stream(tok, text, stop=["forty two", "xyz"])
    assert s.found is None
    assert s.joined == text == s.det.text


# -- the streamed decode ----------------------------------------------------------------------
def test_the_bundled_tokenizer_streams(tok):
    assert stream_backend(tok) is tok.backend_tokenizer
    det = IncrementalDetokenizer(tok, [], False)
    assert isinstance(det._decode, StreamedDecode)


def test_random_ids_give_decode_at_every_token(tok):
    """Any ids at all (special tokens, lone bytes of characters, anything the model may
    sample): after every token the text is the whole output's decode."""
    rng = random.Random(0)
    for _ in range(40):
        det, ids = IncrementalDetokenizer(tok, [], False), []
        for _ in range(120):  # a third of them from the special and byte tokens at the start
            ids.append(rng.randrange(300) if rng.random() < 0.3 else rng.randrange(len(tok)))
            det.update(ids)
            assert det.text == tok.decode(ids, skip_special_tokens=True), ids


class CountingTokenizer:
    """The bundled tokenizer, its whole-output decodes counted."""

    def __init__(self, tok):
        self.tok, self.num_decodes = tok, 0

    def decode(self, ids, skip_special_tokens):
        self.num_decodes += 1
        return self.tok.decode(ids, skip_special_tokens=skip_special_tokens)


def test_a_streamed_output_is_not_decoded_whole_again(tok):
    ids = tok.encode("Hello, world! How are you today? Fine, thanks. 你好 👍🏽 ok")
    counting = CountingTokenizer(tok)
    decode = StreamedDecode(counting, tok.backend_tokenizer)
    for i in range(1, len(ids) + 1):
        assert decode(ids[:i]) == tok.decode(ids[:i], skip_special_tokens=True)
    num_split = sum(REPLACEMENT_CHAR in tok.decode(ids[:i]) for i in range(1, len(ids) + 1))
    assert 0 < counting.num_decodes == num_split  # only while a character's bytes arrive


def test_a_failing_stream_falls_back_to_whole_decodes(tok):
    ids = tok.encode("The answer is forty two.")
    decode = StreamedDecode(tok, tok.backend_tokenizer)
    decode(ids[:2])

    class Broken:
        def step(self, backend, token_id):
            raise Exception("Invalid prefix encountered")

    decode.stream = Broken()
    for i in range(3, len(ids) + 1):
        assert decode(ids[:i]) == tok.decode(ids[:i], skip_special_tokens=True)
    assert decode.stream is None


def test_tokenizers_that_do_more_than_the_rust_decode_are_decoded_whole(tok):
    cleaned = copy.deepcopy(tok)
    cleaned.clean_up_tokenization_spaces = True
    assert stream_backend(cleaned) is None

    class Overridden(type(tok)):
        def _decode(self, token_ids, **kwargs):
            return super()._decode(token_ids, **kwargs).upper()

    overridden = copy.copy(tok)
    overridden.__class__ = Overridden
    assert stream_backend(overridden) is None
    assert stream_backend(object()) is None  # a slow (Python) tokenizer, say
    det = IncrementalDetokenizer(overridden, [], False)
    ids = tok.encode("Hello there")
    det.update(ids)
    assert det.text == "HELLO THERE"
