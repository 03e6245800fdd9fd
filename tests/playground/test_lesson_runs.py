"""Every lesson on the real default model, through the driver at max pace: the first verdict a
viewer sees is the one it still sees at the end, the evidence computed afresh agrees, and the
verdict's numbers agree with the step log. Workloads are the presets' own, cut short where
their lesson allows (shorter answers, fewer users) to keep the suite quick."""

import time
from dataclasses import replace

import pytest

from engine import EngineConfig, LLMEngine
from playground.driver import EngineDriver
from playground.teaching.evidence import Verdict
from playground.teaching.lessons import LESSONS, VerdictBook
from playground.workload.scenarios import SCENARIOS
from playground.workload.users import Workload

MORE_STEPS = 6  # steps run after the first verdict, before the last look


@pytest.fixture(scope="module")
def real_driver(default_model):
    model, tokenizer = default_model
    engine = LLMEngine(model, tokenizer, EngineConfig(num_kv_blocks=1024))
    driver = EngineDriver(engine, pace="max")
    yield driver
    driver.stop()


def _workload(key: str, num_users: int | None = None, tokens: float = 1.0) -> Workload:
    """The preset's workload, its answers cut to `tokens` of their length."""
    w = SCENARIOS[key].workload(num_users=num_users, seed=1)
    profiles = [replace(p, max_tokens=max(4, int(p.max_tokens * tokens))) for p in w.profiles]
    return Workload(w.name, profiles, w.arrival, w.seed, w.cancel_fraction)


def _watch(driver, key, workload, limit_s=60.0, **knobs):
    """Start the lesson's preset and look at every board state like a viewer: the first
    verdict the book gives, then the book's and a fresh evidence's after MORE_STEPS more."""
    sc, lesson, book = SCENARIOS[key], LESSONS[key], VerdictBook()
    sc.start(driver, replace(sc.engine_config(driver.base_config), **knobs), workload=workload)
    driver.resume()
    run, seen, first = driver.state().run, None, None
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        state = driver.state()
        if state.version != seen:
            seen = state.version
            found = book.result(lesson, state, run)
            if first is None and isinstance(found, Verdict):
                first, deadline = found, min(deadline, time.monotonic() + 3.0)
            if first is not None and state.snapshot.step >= first.step + MORE_STEPS:
                break
        time.sleep(0.005)
    assert first is not None, f"{key}: no verdict in {limit_s} s: {found}"
    driver.pause()
    final = driver.state()
    assert book.result(lesson, final, run) == first
    return first, lesson.evidence(final), final


def _assert_answers_only(state):
    """The users' cards hold answers: no chat-template turn ("user", "assistant" lines)."""
    texts = [r.text for r in state.records if r.owner.startswith("user:") and r.text]
    assert texts
    turns = [
        t for t in texts if {"user", "assistant", "system"} & {x.strip() for x in t.split("\n")}
    ]
    assert not turns, turns[:2]


def _events(state, kind):
    return [(s.step, e) for s in state.snapshot.steps for e in s.events if e.kind == kind]


def test_chat_burst(real_driver):
    first, fresh, final = _watch(real_driver, "chat_burst", _workload("chat_burst", tokens=0.25))
    assert fresh == first
    users = {r.request_id for r in final.records if r.owner.startswith("user:")}
    admitted = {}
    for step, e in _events(final, "admitted"):
        admitted.setdefault(e.request_id, step)
    firsts = sorted(admitted[rid] for rid in users if rid in admitted)[:8]
    assert first.step == firsts[-1] and dict(first.numbers)["steps"] == firsts[-1]


def test_long_vs_short(real_driver):
    first, fresh, final = _watch(real_driver, "long_vs_short", _workload("long_vs_short"))
    assert fresh == first and first.answer == "together"
    n = dict(first.numbers)
    steps = {s.step: s for s in final.snapshot.steps}
    chunk = [s for s in range(n["first"], n["last"] + 1)
             if any(e.request_id == n["request"] for e in steps[s].events)]  # fmt: skip
    assert len(chunk) == n["chunks"] >= 2
    assert sum(steps[s].num_decode_tokens > 0 for s in chunk) >= n["together"]
    cached = [e for _, e in _events(final, "admitted") if not e.detail.endswith(" 0 cached")]
    assert not cached  # no prefix-cache hit hides the long prompt's chunks


def test_kv_pressure(real_driver):
    workload = _workload("kv_pressure", 4, 0.25)  # 4 answers of 40 tokens in 14 blocks
    first, fresh, final = _watch(real_driver, "kv_pressure", workload, num_kv_blocks=14)
    assert fresh == first and first.answer == "preempt"
    n = dict(first.numbers)
    step, victim = next((s, e.request_id) for s, e in _events(final, "preempted"))
    assert (first.step, n["request"]) == (step, victim)
    at = next(s for s in final.snapshot.steps if s.step == step)
    assert (n["running"], n["free"]) == (at.num_running, at.kv_blocks_free)
    _assert_answers_only(final)  # fixed lengths (ignore_eos) without the next turn's text


def test_prefix_cache(real_driver):
    first, fresh, final = _watch(real_driver, "prefix_cache", _workload("prefix_cache", 4, 0.3))
    assert fresh == first and first.answer == "most"
    n = dict(first.numbers)
    details = {}
    for _, e in _events(final, "admitted"):
        details.setdefault(e.request_id, e.detail)
    cached = [int(d.split(", ")[1].split()[0]) for d in list(details.values())[: n["requests"]]]
    assert sum(cached) == n["cached"] > 0


def test_vip_users(real_driver):
    first, fresh, final = _watch(real_driver, "vip_users", _workload("vip_users", tokens=0.6))
    assert fresh == first
    n = dict(first.numbers)
    vips = {r.request_id for r in final.snapshot.requests if r.priority == 0}
    admitted = [s for s, e in _events(final, "admitted") if e.request_id in vips]
    assert first.step in admitted
    preempted = [s for s, _ in _events(final, "preempted") if n["arrived"] <= s <= first.step]
    assert len(preempted) == n["preempted"]
    assert first.answer == ("preempt" if n["preempted"] and n["wait"] <= 2 else "queue")
    _assert_answers_only(final)


def test_beam_search(real_driver):
    first, fresh, final = _watch(real_driver, "beam_search", _workload("beam_search", 4, 0.4))
    assert fresh.answer == first.answer == "shared"  # (its numbers are of a later moment)
    n = dict(first.numbers)
    forks = [e for _, e in _events(final, "beams") if e.request_id == n["request"]]
    assert n["physical"] < n["logical"] and (forks or n["shared"])


def test_static_vs_continuous(real_driver):
    workload = _workload("static_vs_continuous", 6, 0.3)
    first, fresh, final = _watch(real_driver, "static_vs_continuous", workload, max_num_seqs=3)
    assert fresh == first
    cont, static = (final.stats[lane] for lane in final.lanes)
    assert first.step == max(cont.finish_step, static.finish_step)
    assert dict(first.numbers)["ratio"] == static.finish_busy_s / cont.finish_busy_s
    _assert_answers_only(final)
