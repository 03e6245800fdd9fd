"""Simulated users, arrival processes and the one-click presets: built without an engine,
then each preset run on a real engine (tiny random model) to show it does what it promises."""

import itertools
import random
from dataclasses import replace
from types import SimpleNamespace

import pytest

from engine import EngineConfig, StopReason
from playground.workload.scenarios import SCENARIOS, Scenario
from playground.workload.users import (
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
        self.sent, self.aborted, self.priorities = [], [], []

    def submit(self, prompt, params, owner, priority=0):
        self.sent.append((prompt, params, owner))
        self.priorities.append(priority)
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
    w.tick(0.0, fake.submit)
    assert len(fake.sent) == 1 and w.views()[0].state == "waiting for answer"
    prompt, params, owner = fake.sent[0]
    assert owner == "user:Ada" and prompt[-1]["role"] == "user" and params.max_tokens == 5
    w.tick(5.0, fake.submit)
    assert len(fake.sent) == 1  # one request out at a time
    w.on_output(_out("req-1", 5, True, StopReason.MAX_TOKENS), 6.0, fake.abort)
    assert w.views()[0].state == "thinking" and w.views()[0].next_at == 7.0
    w.tick(6.5, fake.submit)
    assert len(fake.sent) == 1
    w.tick(7.0, fake.submit)
    assert len(fake.sent) == 2
    w.on_rejected("req-2", 7.5)
    assert w.views()[0].state == "done" and w.is_done


def test_some_users_cancel_on_purpose():
    profile = UserProfile("Bo", "#000", cancel_after=3)
    w = Workload("t", [profile], cancel_fraction=1.0)
    fake = FakeDriver()
    w.tick(0.0, fake.submit)
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
    w.tick(1000.0, fake.submit)  # far in the future: every user has arrived
    assert len(fake.sent) == sc.num_users
    assert {owner for _, _, owner in fake.sent} == {u.owner for u in w.views()}


def test_presets_show_what_they_promise():
    assert SCENARIOS["static_vs_continuous"].compare
    assert SCENARIOS["kv_pressure"].engine_overrides["num_kv_blocks"] <= 64
    prefix = SCENARIOS["prefix_cache"].workload(seed=0)
    fake = FakeDriver()
    prefix.tick(100.0, fake.submit)
    systems = {prompt[0]["content"] for prompt, _, _ in fake.sent}
    assert len(systems) == 1 and len(next(iter(systems)).split()) > 150  # one shared prefix
    long_short = SCENARIOS["long_vs_short"].workload(seed=0)
    assert {u.profile.pool for u in long_short.users} == {"long", "chat"}


def test_each_workload_is_built_for_its_lesson():
    burst = SCENARIOS["chat_burst"].workload(seed=0)
    lengths = [u.profile.max_tokens for u in burst.users]
    assert len(set(lengths)) == len(lengths)  # users leave the batch at different steps
    sc = SCENARIOS["long_vs_short"]
    assert sc.engine_overrides["enable_prefix_caching"] is False  # no accidental cache hit
    w, fake = sc.workload(seed=0), FakeDriver()
    w.tick(0.5, fake.submit)
    assert {p[-1]["content"] in load_pool("chat") for p, _, _ in fake.sent} == {True}
    w.tick(2.0, fake.submit)  # the readers come once the chats run, each with its own passage
    passages = [p[-1]["content"] for p, _, _ in fake.sent[4:]]
    assert len(passages) == 2 and len(set(passages)) == 2
    assert all(p in load_pool("long") for p in passages)
    spoilers = ("one or two steps", "keep decoding", "recomputed", "preempts", "at once and",
                "shares every", "copies only", "refills", "cache is found", "faster")  # fmt: skip
    for scenario in SCENARIOS.values():  # what runs, never the answer
        assert not [s for s in spoilers if s in scenario.what_to_watch], scenario.key


# -- each preset on a real engine (tiny random model) ------------------------------------------
DT = 0.05  # simulated seconds per engine step: the users' clock, so every run is repeatable


def run_preset(make_engine, key: str, max_steps: int, until=None, **overrides):
    """The preset's workload on a real engine with its engine overrides, stepped like the
    driver does (users tick, one step, outputs back to the users) on a simulated clock,
    until `until(engine, workload)` or max_steps. Returns (engine, workload, number of steps)."""
    sc = SCENARIOS[key]
    # the command line leaves num_kv_blocks to memory; 1024 blocks stand in for that here
    engine = make_engine(EngineConfig(**{"num_kv_blocks": 1024, **sc.engine_overrides,
                                         **overrides}))  # fmt: skip
    workload, ids = sc.workload(seed=0), itertools.count(1)

    def submit(prompt, params, owner, priority):
        rid = f"req-{next(ids)}"
        # Greedy: what is scheduled does not depend on which tokens are picked, and a random
        # model's flat logits make top-p sort the whole vocabulary (most of a step's time).
        engine.add_request(rid, prompt, replace(params, temperature=0.0), priority=priority)
        return rid

    for n in range(1, max_steps + 1):
        now = n * DT
        workload.tick(now, submit)
        for out in engine.step() if engine.has_unfinished_requests() else ():
            workload.on_output(out, now, engine.abort_request)
        if until is not None and until(engine, workload):
            break
    return engine, workload, n


def test_chat_burst_admits_everyone_at_once_and_finishes_every_request(make_engine):
    first_round = {f"req-{i}" for i in range(1, 9)}  # all at once: the 8 users' first requests

    def all_done(engine, _):
        return not first_round & {r.request_id for r in engine.snapshot().requests
                                  if r.status != "finished"}  # fmt: skip

    engine, _, n = run_preset(make_engine, "chat_burst", 120, all_done)
    snap = engine.snapshot()
    done = {r.request_id: r.stop_reason for r in snap.requests if r.status == "finished"}
    assert first_round <= done.keys(), f"unfinished after {n} steps"
    assert set(done.values()) <= {"eos", "max_tokens", "cancelled"}
    assert snap.steps[1].num_waiting == 0  # the queue drained into the batch in two steps


def _prefill_steps(steps) -> dict[str, int]:
    """request id -> number of steps that prefilled part of its prompt."""
    counts: dict[str, int] = {}
    for s in steps:
        for e in s.events:
            if e.kind in ("prefill_chunk", "prefill_done"):
                counts[e.request_id] = counts.get(e.request_id, 0) + 1
    return counts


def _chunks_next_to_decodes(steps) -> list:
    """Steps that prefilled a chunk of a prompt (not its last) while others decoded."""
    chunk = [s for s in steps if any(e.kind == "prefill_chunk" for e in s.events)]
    return [s for s in chunk if s.num_decode_tokens]


def test_long_prompts_are_prefilled_in_chunks_next_to_decodes(make_engine):
    def shown(engine, _):
        steps = engine.snapshot().steps
        longest = max(_prefill_steps(steps).values(), default=0)
        return longest >= 3 and bool(_chunks_next_to_decodes(steps))

    engine, _, n = run_preset(make_engine, "long_vs_short", 200, shown)
    steps = engine.snapshot().steps
    budget = SCENARIOS["long_vs_short"].engine_overrides["max_num_batched_tokens"]
    assert all(s.num_tokens <= budget for s in steps)
    assert max(_prefill_steps(steps).values()) >= 3, f"no prompt prefilled over 3 steps in {n}"
    assert _chunks_next_to_decodes(steps), "short chats did not decode next to a long prefill"


def test_kv_pressure_preempts(make_engine):
    def preempted(engine, _):
        return engine.snapshot().totals.num_preemptions > 0

    engine, _, n = run_preset(make_engine, "kv_pressure", 200, preempted)
    snap = engine.snapshot()
    assert snap.totals.num_preemptions > 0, f"no preemption in {n} steps"
    assert snap.kv_blocks_total == 40
    assert any(e.kind == "preempted" for s in snap.steps for e in s.events)


def test_shared_system_prompt_hits_the_prefix_cache(make_engine):
    def hit(engine, _):
        return any(r.num_cached_tokens for r in engine.snapshot().requests)

    engine, _, n = run_preset(make_engine, "prefix_cache", 200, hit)
    cached = max(r.num_cached_tokens for r in engine.snapshot().requests)
    assert cached >= 200, f"{cached} cached prompt tokens after {n} steps"  # the system prompt
    assert engine.snapshot().totals.num_prefix_hits > 0


def test_continuous_finishes_the_static_vs_continuous_work_sooner(make_engine):
    """The same 16 fixed-length requests through each policy: continuous refills the batch
    every step; static admits a new batch only when the whole batch is done. In the steps
    continuous takes to finish all of it, static finishes less of the same work."""
    key = "static_vs_continuous"
    cont, workload, n = run_preset(make_engine, key, 400, lambda e, w: w.is_done)
    work = sum(p.max_tokens for p in workload.profiles)  # ignore_eos: exactly this many tokens
    assert workload.is_done and cont.snapshot().totals.num_generated_tokens == work
    static, workload, _ = run_preset(make_engine, key, n, batching="static")
    assert not workload.is_done, f"static finished in {n} steps too"
    generated = static.snapshot().totals.num_generated_tokens
    assert generated < 0.8 * work, (generated, work, n)  # fewer tokens per step
    assert static.snapshot().num_finished < cont.snapshot().num_finished


def test_vip_users_arrive_into_a_full_engine_and_jump_the_queue(make_engine):
    """The regular users fill every seat; the VIPs (priority 0) arrive later, preempt the
    regulars and get their first token sooner than the regulars still waiting then."""
    sc = SCENARIOS["vip_users"]
    vips = {f"user:{p.name}" for p in sc.workload().profiles if p.priority == 0}
    seen: dict[str, int] = {}  # request id -> its user's priority

    def vips_answered(engine, workload):
        for u in workload.users:
            if u.request_id is not None:
                seen.setdefault(u.request_id, u.profile.priority)
        done = [r for r in engine.snapshot().requests if seen.get(r.request_id) == 0]
        return len(done) >= len(vips) and all(r.first_token is not None for r in done)

    engine, _, n = run_preset(make_engine, "vip_users", 400, vips_answered)
    snap = engine.snapshot()
    assert snap.scheduling_policy == "priority" and len(vips) >= 2
    vip_states = [r for r in snap.requests if seen.get(r.request_id) == 0]
    assert len(vip_states) >= len(vips), f"the VIPs were not all answered in {n} steps"
    first_vip_arrival = min(r.arrival for r in vip_states)
    still_waiting = [
        r for r in snap.requests if seen.get(r.request_id, 0) > 0 and r.arrival < first_vip_arrival
        and (r.first_scheduled is None or r.first_scheduled > first_vip_arrival)
    ]  # fmt: skip
    assert still_waiting, "the engine was not full when the VIPs came"
    assert snap.totals.num_preemptions > 0  # seats were taken from regular users
    vip_wait = max(r.first_scheduled - r.arrival for r in vip_states)
    assert all(vip_wait < (r.first_scheduled or float("inf")) - r.arrival for r in still_waiting)


def test_beam_search_preset_forks_prunes_and_shows_its_beams(make_engine):
    seen_beams = []

    def beams_done(engine, workload):
        seen_beams.extend(r.beams for r in engine.snapshot().requests if r.beams)
        return any(r.beam_width == 4 and r.status == "finished" for r in engine.snapshot().requests)

    engine, _, n = run_preset(make_engine, "beam_search", 300, beams_done)
    snap = engine.snapshot()
    assert any(r.beam_width == 4 and r.status == "finished" for r in snap.requests), n
    details = [e.detail for s in snap.steps for e in s.events if e.kind == "beams"]
    assert any("forked beam" in d for d in details) and any("pruned" in d for d in details)
    assert any(len(b) == 4 for b in seen_beams)  # a card had four live beams to show


def test_a_preset_knob_must_be_an_engine_config_field():
    with pytest.raises(ValueError, match="engine_overrides: 'kv_blocks'"):
        Scenario("x", "X", "", UserProfile("a", "#000"), engine_overrides={"kv_blocks": 8})
    base = EngineConfig(max_num_seqs=4, max_num_batched_tokens=64)
    cfg = SCENARIOS["kv_pressure"].engine_config(base)
    assert (cfg.num_kv_blocks, cfg.max_num_seqs, cfg.block_size) == (40, 8, 16)
    assert base.num_kv_blocks is None  # the base is left as it was
