"""SamplingParams: contract defaults, normalisation, and validation naming the field."""

import math

import pytest

from engine import FieldError
from engine.sampling_params import (
    MAX_LOGPROBS,
    MAX_N,
    MAX_STOP_STRING_LEN,
    MAX_STOP_STRINGS,
    SamplingParams,
)


def test_defaults_match_the_contract():
    p = SamplingParams()
    assert p.max_tokens == 128
    assert p.temperature == 1.0
    assert p.top_k == 0
    assert p.top_p == 1.0
    assert p.min_p == 0.0
    assert p.repetition_penalty == 1.0
    assert p.stop == []
    assert p.stop_token_ids == []
    assert p.ignore_eos is False
    assert p.include_stop_str_in_output is False
    assert p.n == 1
    assert p.seed is None
    assert p.logprobs is None
    assert p.timeout_s is None
    assert not p.is_greedy


def test_default_lists_are_not_shared_between_instances():
    a, b = SamplingParams(), SamplingParams()
    a.stop.append("x")
    a.stop_token_ids.append(3)
    assert b.stop == [] and b.stop_token_ids == []


def test_temperature_zero_is_greedy():
    assert SamplingParams(temperature=0).is_greedy
    assert SamplingParams(temperature=0.0).is_greedy
    assert not SamplingParams(temperature=1e-3).is_greedy


def test_str_stop_becomes_a_list():
    assert SamplingParams(stop="END").stop == ["END"]


def test_stop_sequences_are_copied_to_lists():
    stop, ids = ["a", "b"], (5, 6)
    p = SamplingParams(stop=stop, stop_token_ids=ids)
    assert p.stop == ["a", "b"] and p.stop_token_ids == [5, 6]
    assert isinstance(p.stop_token_ids, list)
    stop.append("c")  # the caller's list is not aliased
    assert p.stop == ["a", "b"]
    assert SamplingParams(stop=("x", "y")).stop == ["x", "y"]


def test_boundary_values_accepted():
    SamplingParams(
        max_tokens=1, temperature=0.0, top_k=1, top_p=1e-9, min_p=1.0,
        repetition_penalty=1e-3, stop=["x" * MAX_STOP_STRING_LEN] * MAX_STOP_STRINGS,
        stop_token_ids=[0], seed=0, logprobs=0, timeout_s=1e-3,
    )  # fmt: skip
    SamplingParams(
        seed=2**63 - 1, logprobs=MAX_LOGPROBS, top_k=10**6, temperature=100.0, n=MAX_N
    )  # n > 1 needs sampling (greedy takes n=1 only)


NAN, INF = math.nan, math.inf

INVALID = [
    ("max_tokens", 0),
    ("max_tokens", -1),
    ("max_tokens", 1.5),
    ("max_tokens", 10.0),
    ("max_tokens", True),
    ("max_tokens", "5"),
    ("max_tokens", None),
    ("temperature", -0.1),
    ("temperature", NAN),
    ("temperature", INF),
    ("temperature", -INF),
    ("temperature", True),
    ("temperature", "1.0"),
    ("temperature", None),
    ("top_k", -1),
    ("top_k", 2.5),
    ("top_k", True),
    ("top_k", None),
    ("top_p", 0),
    ("top_p", 0.0),
    ("top_p", -0.5),
    ("top_p", 1.0001),
    ("top_p", NAN),
    ("top_p", INF),
    ("top_p", True),
    ("top_p", "0.9"),
    ("min_p", -0.01),
    ("min_p", 1.01),
    ("min_p", NAN),
    ("min_p", INF),
    ("min_p", False),
    ("repetition_penalty", 0),
    ("repetition_penalty", 0.0),
    ("repetition_penalty", -1.0),
    ("repetition_penalty", NAN),
    ("repetition_penalty", INF),
    ("repetition_penalty", True),
    ("repetition_penalty", "1.2"),
    ("stop", [""]),
    ("stop", ""),
    ("stop", ["ok", ""]),
    ("stop", ["x" * (MAX_STOP_STRING_LEN + 1)]),
    ("stop", ["s"] * (MAX_STOP_STRINGS + 1)),
    ("stop", [5]),
    ("stop", ["ok", None]),
    ("stop", [b"bytes"]),
    ("stop_token_ids", [-1]),
    ("stop_token_ids", [1.0]),
    ("stop_token_ids", [True]),
    ("stop_token_ids", ["7"]),
    ("stop_token_ids", [3, None]),
    ("ignore_eos", 1),
    ("ignore_eos", "yes"),
    ("ignore_eos", None),
    ("include_stop_str_in_output", 0),
    ("include_stop_str_in_output", "true"),
    ("n", 0),
    ("n", -2),
    ("n", MAX_N + 1),
    ("n", 10**9),
    ("n", 2.0),
    ("n", True),
    ("seed", -1),
    ("seed", 2**63),
    ("seed", 10**30),
    ("seed", 1.5),
    ("seed", True),
    ("seed", "42"),
    ("logprobs", -1),
    ("logprobs", MAX_LOGPROBS + 1),
    ("logprobs", 10**6),
    ("logprobs", 2.0),
    ("logprobs", True),
    ("timeout_s", 0),
    ("timeout_s", 0.0),
    ("timeout_s", -1.0),
    ("timeout_s", NAN),
    ("timeout_s", INF),
    ("timeout_s", True),
    ("timeout_s", "10"),
]


@pytest.mark.parametrize(("name", "value"), INVALID, ids=lambda v: repr(v)[:30])
def test_invalid_value_raises_value_error_naming_field(name, value):
    with pytest.raises(FieldError, match=rf"\b{name}\b") as info:
        SamplingParams(**{name: value})
    assert "got" in str(info.value)  # the message shows what it got
    assert info.value.field == name  # a caller need not parse the message


@pytest.mark.parametrize(("name", "value"), [("stop", 5), ("stop_token_ids", 5), ("stop", 1.5)])
def test_wrong_container_type_raises_value_error_naming_field(name, value):
    # A scalar where a list is expected is a caller error like any other: ValueError, not
    # TypeError from list(...).
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        SamplingParams(**{name: value})


@pytest.mark.parametrize("name", ["stop", "stop_token_ids"])
def test_none_list_is_empty_or_value_error(name):
    # OpenAI clients send `"stop": null`; either it means "none" or it is refused cleanly.
    try:
        p = SamplingParams(**{name: None})
    except ValueError as e:
        assert name in str(e)
    else:
        assert getattr(p, name) == []


def test_error_message_shows_the_range_and_value():
    with pytest.raises(ValueError, match=r"top_p.*\(0, 1\].*1\.5"):
        SamplingParams(top_p=1.5)
    with pytest.raises(ValueError, match=r"n .*\[1, 16\].*17"):
        SamplingParams(n=17)


def test_beam_search_fields():
    p = SamplingParams(temperature=0.0, beam_width=4, n=2, length_penalty=0.6)
    assert p.use_beam_search and p.num_seqs == 4
    assert not SamplingParams(n=3).use_beam_search and SamplingParams(n=3).num_seqs == 3


BEAM = dict(temperature=0.0, beam_width=3)


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        (dict(beam_width=0), "beam_width"),
        (dict(beam_width=17), "beam_width"),
        (dict(beam_width=2.0), "beam_width"),
        (dict(length_penalty=0.5), "length_penalty"),  # no beams: it would do nothing
        (dict(BEAM, length_penalty=float("nan")), "length_penalty"),
        (dict(BEAM, length_penalty="1"), "length_penalty"),
        (dict(BEAM, n=4), "n"),  # more completions than beams
        (dict(beam_width=3), "temperature"),  # the default 1.0 would sample
        (dict(BEAM, top_k=5), "top_k"),
        (dict(BEAM, top_p=0.9), "top_p"),
        (dict(BEAM, min_p=0.1), "min_p"),
        (dict(BEAM, seed=1), "seed"),
        (dict(BEAM, repetition_penalty=1.2), "repetition_penalty"),
        (dict(BEAM, logprobs=2), "logprobs"),
        (dict(BEAM, stop=["x"]), "stop"),
        (dict(BEAM, stop_token_ids=[5]), "stop_token_ids"),
    ],
)
def test_beam_search_refuses_what_it_cannot_honour_naming_the_field(fields, name):
    with pytest.raises(FieldError, match=rf"^{name}\b") as info:
        SamplingParams(**fields)
    assert info.value.field == name and "got" in str(info.value)
