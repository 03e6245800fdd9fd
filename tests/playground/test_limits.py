"""Public limits: what one visitor may ask, and the in-flight count the driver keeps."""

import pytest

from engine import SamplingParams, StopReason
from playground.access.limits import LimitExceeded, PublicLimits
from tests.playground.driving import settled

GREEDY = dict(temperature=0.0, ignore_eos=True)


@pytest.mark.parametrize(
    "field,value",
    [("max_prompt_tokens", 0), ("max_tokens", -1), ("max_n", 1.5), ("max_in_flight", True),
     ("default_timeout_s", 0), ("default_timeout_s", float("nan")), ("default_timeout_s", "9")],
)  # fmt: skip
def test_bad_limits_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        PublicLimits(**{field: value})


def test_check_refuses_past_each_limit_and_fills_the_default_timeout():
    limits = PublicLimits(max_prompt_tokens=10, max_tokens=8, max_n=2, default_timeout_s=60)
    ok = limits.check(SamplingParams(max_tokens=8, n=2), num_prompt_tokens=10)
    assert ok.timeout_s == 60.0 and ok.max_tokens == 8
    mine = SamplingParams(max_tokens=4, timeout_s=5)
    assert limits.check(mine, 1).timeout_s == 5  # the caller's own wins
    assert PublicLimits(default_timeout_s=None).check(SamplingParams(), 1).timeout_s is None
    for params, tokens, field in [
        (SamplingParams(), 11, "prompt"),
        (SamplingParams(max_tokens=9), 1, "max_tokens"),
        (SamplingParams(max_tokens=1, n=3), 1, "n"),
    ]:
        with pytest.raises(LimitExceeded) as info:
            limits.check(params, tokens)
        assert info.value.field == field and info.value.status == 400
        assert str(info.value).startswith(field)


def test_in_flight_limit_is_per_owner_and_frees_up(driver):
    driver.pause()  # nothing finishes meanwhile
    params = SamplingParams(max_tokens=2, **GREEDY)
    mine = [driver.submit(f"mine {i}", params, owner="visitor:a", max_in_flight=2, wait=True)
            for i in range(2)]  # fmt: skip
    with pytest.raises(LimitExceeded) as info:
        driver.submit("one too many", params, owner="visitor:a", max_in_flight=2, wait=True)
    assert info.value.status == 429 and info.value.field == "requests"
    other = driver.submit("someone else", params, owner="visitor:b", max_in_flight=2, wait=True)
    waiting = settled(driver, lambda s: s.snapshot.num_waiting == 3).snapshot.num_waiting
    assert waiting == 3  # the refused one was never queued
    driver.resume()
    for h in [*mine, other]:
        assert h.result(timeout=30).stop_reason == StopReason.MAX_TOKENS
    again = driver.submit("after", params, owner="visitor:a", max_in_flight=2, wait=True)
    assert again.result(timeout=30).finished
