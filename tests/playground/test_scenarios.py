"""Simulated users, arrival processes and the one-click presets (no engine)."""

import random
from types import SimpleNamespace

import pytest

from engine import EngineConfig, StopReason
from playground.scenarios import SCENARIOS
from playground.users import (
    AllAtOnce,
    Bursts,
    Poisson,
    UserProfile,
    Workload,
    load_pool,
    make_arrival,
    make_profiles,
)


class FakeDriver:
    """Stands in for the driver: records what a workload submits and aborts."""

    def __init__(self):
        self.sent, self.aborted = [], []

    def submit(self, prompt, params, owner):
        self.sent.append((prompt, params, owner))
        return f"req-{len(self.sent)}"

    def abort(self, request_id):
        self.aborted.append(request_id)


def _out(rid, num_tokens, finished=False, reason=None):
    return SimpleNamespace(
        request_id=rid, token_ids=list(range(num_tokens)), finished=finished,
        stop_reason=reason,
    )  # fmt: skip


def test_arrival_processes():
    rng = random.Random(0)
    assert AllAtOnce().start_times(3, rng) == [0.0, 0.0, 0.0]
    assert Bursts(size=2, every=5.0).start_times(5, rng) == [0, 0, 5, 5, 10]
    times = Poisson(rate=4.0).start_times(2000, random.Random(1))
    assert times == sorted(times)
    assert 2000 / times[-1] == pytest.approx(4.0, rel=0.1)  # about rate arrivals per second
    assert isinstance(make_arrival("poisson", 2.0), Poisson)
    with pytest.raises(ValueError, match="arrival"):
        make_arrival("sometimes")


def test_users_arrive_wait_think_and_stop_after_max_requests():
    profile = UserProfile("Ada", "#000", think_time=(1.0, 1.0), max_requests=2, max_tokens=5)
    w = Workload("t", [profile], Bursts(1, 10.0))
    fake = FakeDriver()
    w.tick(0.0, fake.submit, fake.abort)
    assert len(fake.sent) == 1 and w.views()[0].state == "waiting for answer"
    prompt, params, owner = fake.sent[0]
    assert owner == "user:Ada" and prompt[-1]["role"] == "user" and params.max_tokens == 5
    w.tick(5.0, fake.submit, fake.abort)
    assert len(fake.sent) == 1  # one request out at a time
    w.on_output(_out("req-1", 5, True, StopReason.MAX_TOKENS), 6.0, fake.abort)
    assert w.views()[0].state == "thinking" and w.views()[0].next_at == 7.0
    w.tick(6.5, fake.submit, fake.abort)
    assert len(fake.sent) == 1
    w.tick(7.0, fake.submit, fake.abort)
    assert len(fake.sent) == 2
    w.on_rejected("req-2", 7.5)
    assert w.views()[0].state == "done" and w.is_done


def test_some_users_cancel_on_purpose():
    profile = UserProfile("Bo", "#000", cancel_after=3)
    w = Workload("t", [profile], cancel_fraction=1.0)
    fake = FakeDriver()
    w.tick(0.0, fake.submit, fake.abort)
    w.on_output(_out("req-1", 2), 0.1, fake.abort)
    assert fake.aborted == []
    w.on_output(_out("req-1", 3), 0.2, fake.abort)
    w.on_output(_out("req-1", 4), 0.3, fake.abort)
    assert fake.aborted == ["req-1"]  # once
    w.on_output(_out("req-1", 4, True, StopReason.CANCELLED), 0.4, fake.abort)
    assert w.views()[0].num_cancelled == 1


def test_make_profiles_names_and_colours_users_in_turn():
    profiles = make_profiles(40, [UserProfile("", "", pool="chat"), UserProfile("", "", "long")])
    assert len({p.name for p in profiles}) == 40
    assert [p.pool for p in profiles[:3]] == ["chat", "long", "chat"]


def test_prompt_pools_load():
    assert len(load_pool("chat")) >= 20
    assert all(len(p.split()) > 150 for p in load_pool("long"))
    assert not any(p.startswith("#") for p in load_pool("library_questions"))


@pytest.mark.parametrize("key", sorted(SCENARIOS))
def test_every_preset_builds_a_workload_and_a_valid_config(key):
    sc = SCENARIOS[key]
    EngineConfig(**sc.engine_overrides)  # names and values the engine accepts
    w = sc.workload(seed=3)
    assert len(w.users) == sc.num_users
    fake = FakeDriver()
    w.tick(1000.0, fake.submit, fake.abort)  # far in the future: every user has arrived
    assert len(fake.sent) == sc.num_users
    assert {owner for _, _, owner in fake.sent} == {u.owner for u in w.views()}


def test_presets_show_what_they_promise():
    assert SCENARIOS["static_vs_continuous"].compare
    assert SCENARIOS["kv_pressure"].engine_overrides["num_kv_blocks"] <= 64
    prefix = SCENARIOS["prefix_cache"].workload(seed=0)
    fake = FakeDriver()
    prefix.tick(100.0, fake.submit, fake.abort)
    systems = {prompt[0]["content"] for prompt, _, _ in fake.sent}
    assert len(systems) == 1 and len(next(iter(systems)).split()) > 150  # one shared prefix
    long_short = SCENARIOS["long_vs_short"].workload(seed=0)
    assert {u.profile.pool for u in long_short.users} == {"long", "chat"}
