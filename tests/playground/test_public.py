"""The public door: one tokenization, the limits, and one typed refusal naming the field."""

import pytest

from engine import SamplingParams
from playground.access import public
from playground.access.limits import LimitExceeded
from playground.handles import RequestRejected
from tests.playground.driving import fixed, settled


def test_a_bad_sampling_field_is_refused_by_name():
    with pytest.raises(RequestRejected) as info:
        public.sampling_params(max_tokens=4, top_p=0.0)
    assert info.value.field == "top_p" and info.value.status == 400 and info.value.code is None
    with pytest.raises(RequestRejected) as info:
        public.sampling_params(stop=["x" * 300])
    assert info.value.field == "stop"


def test_an_unusable_prompt_is_refused_as_the_prompt(driver):
    for prompt in ("   ", [], [{"role": "user", "content": " "}]):
        with pytest.raises(RequestRejected) as info:
            public.tokenize(driver, prompt)
        assert info.value.field == "prompt"


def test_the_engine_gets_the_token_ids_and_the_board_the_text(driver, monkeypatch):
    sent = []
    submit = driver.submit

    def spy(prompt, params=None, **kw):
        sent.append((prompt, kw["label"], kw["max_in_flight"]))
        return submit(prompt, params, **kw)

    monkeypatch.setattr(driver, "submit", spy)
    handle = public.submit_text(driver, "Hello <b>there</b>", fixed(3), "visitor:a")
    assert handle.result(timeout=30).finished
    [(prompt, label, limit)] = sent
    messages = [{"role": "user", "content": "Hello <b>there</b>"}]
    assert prompt == public.tokenize(driver, messages) and limit == driver.limits.max_in_flight
    assert label == "Hello <b>there</b>"
    state = settled(driver, lambda s: s.records and s.records[-1].finished)
    assert state.records[-1].prompt == label and state.records[-1].owner == "visitor:a"


def test_past_a_limit_or_a_full_queue_nothing_is_queued(make_engine):
    from playground.driver import EngineDriver

    driver = EngineDriver(make_engine(max_waiting=1), engine_factory=make_engine)
    try:
        driver.pause()
        ids = public.tokenize(driver, "some prompt")
        with pytest.raises(LimitExceeded) as info:
            public.submit(driver, "some prompt", ids, SamplingParams(max_tokens=10_000), "api:x")
        assert info.value.field == "max_tokens" and info.value.code == "limit_exceeded"
        public.submit(driver, "fills the queue", ids, fixed(2), "api:x")
        settled(driver, lambda s: s.snapshot.num_waiting == 1)
        with pytest.raises(RequestRejected) as info:
            public.submit(driver, "one more", ids, fixed(2), "api:y")
        assert (info.value.status, info.value.code, info.value.field) == (429, "queue_full",
                                                                          "requests")  # fmt: skip
        assert driver.snapshot().num_waiting == 1
    finally:
        driver.stop()
