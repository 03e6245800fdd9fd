"""Telemetry: percentile(), totals from hand-made records, EngineSnapshot.kv_blocks_free."""

import dataclasses
import math

import pytest

from engine.outputs import RequestMetrics
from engine.telemetry import (
    MAX_STEP_RECORDS,
    EngineSnapshot,
    StepEvent,
    StepRecord,
    Telemetry,
    Totals,
    percentile,
)


def nearest_rank(values, q):
    """Reference: the smallest value with at least q % of the values at or below it."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered) / 100))  # q * n / 100 in exact-ish arithmetic
    return ordered[rank - 1]


# -- percentile -----------------------------------------------------------------------------
def test_percentile_of_nothing_is_none():
    assert percentile([], 50) is None
    assert percentile((), 95) is None


def test_percentile_of_one_value():
    for q in (0, 1, 50, 95, 99, 100):
        assert percentile([0.25], q) == 0.25


def test_percentile_textbook_example():
    # the nearest-rank example of the Wikipedia "Percentile" article
    values = [15, 20, 35, 40, 50]
    assert [percentile(values, q) for q in (5, 30, 40, 50, 100)] == [15, 20, 20, 35, 50]


def test_percentile_ignores_input_order():
    assert percentile([5, 1, 4, 2, 3], 50) == 3
    assert percentile([5, 1, 4, 2, 3], 100) == 5
    assert percentile([5, 1, 4, 2, 3], 0) == 1


@pytest.mark.parametrize(
    ("n", "q", "expected"),
    [
        (100, 50, 50),
        (100, 95, 95),
        (100, 99, 99),
        (10, 50, 5),
        (10, 90, 9),
        (20, 95, 19),
        (4, 50, 2),
        (4, 75, 3),
    ],
)
def test_percentile_when_the_rank_is_a_whole_number(n, q, expected):
    # q % of n values is exactly k values: the answer is the k-th, not the (k+1)-th
    assert percentile(list(range(1, n + 1)), q) == expected


@pytest.mark.parametrize("n", [1, 2, 3, 7, 10, 19, 20, 33, 100, 101])
@pytest.mark.parametrize("q", [1, 25, 50, 90, 95, 99, 100])
def test_percentile_is_nearest_rank(n, q):
    values = [float(v) for v in range(n, 0, -1)]
    assert percentile(values, q) == nearest_rank(values, q)


def test_percentile_is_monotonic_in_q():
    values = [3.0, 1.0, 7.5, 2.0, 9.0, 4.0, 4.0]
    got = [percentile(values, q) for q in range(0, 101)]
    assert got == sorted(got)
    assert got[0] == 1.0 and got[-1] == 9.0


# -- Telemetry totals -------------------------------------------------------------------------
def record(step, prefill=0, decode=0, duration=0.1, events=(), generated=0, **kw):
    fields = dict(
        step=step, start=100.0 + step, duration=duration, forward_duration=duration / 2,
        num_prefill_tokens=prefill, num_decode_tokens=decode, num_seqs=1, token_budget=16,
        num_waiting=0, num_running=1, kv_blocks_used=2, kv_blocks_cached=1, kv_blocks_free=5,
        events=tuple(events), num_generated_tokens=generated,
    )  # fmt: skip
    fields.update(kw)
    return StepRecord(**fields)


def metrics(arrival, first_token, finished, generated, cached=0):
    return RequestMetrics(
        arrival=arrival, first_scheduled=arrival, first_token=first_token, finished=finished,
        num_prompt_tokens=8, num_cached_tokens=cached, num_generated_tokens=generated,
    )  # fmt: skip


def test_empty_totals():
    t = Telemetry().totals()
    assert t == Totals()
    assert t.tokens_per_s == 0.0 and t.ttft_p50 is None and t.tpot_p95 is None
    assert t.stop_reasons == {}


def test_step_record_num_tokens():
    assert record(0, prefill=12, decode=3).num_tokens == 15


def test_totals_from_steps():
    tel = Telemetry()
    tel.record_step(record(0, prefill=8, duration=0.5, generated=1))
    tel.record_step(record(1, decode=2, duration=0.25, generated=2))
    tel.record_step(record(2, duration=7.0, generated=0))  # idle: not busy time
    pre = [StepEvent("preempted", "a"), StepEvent("preempted", "b"), StepEvent("admitted", "c")]
    tel.record_step(record(3, prefill=4, decode=1, duration=0.25, events=pre, generated=1))
    t = tel.totals()
    assert t.num_prompt_tokens == 12
    assert t.num_generated_tokens == 4
    assert t.num_preemptions == 2
    assert t.elapsed_busy == pytest.approx(1.0)
    assert t.tokens_per_s == pytest.approx(4.0)
    assert [r.step for r in tel.steps] == [0, 1, 2, 3]


def test_totals_from_finished_requests():
    tel = Telemetry()
    # request i: ttft = i / 10 s, then 10 more tokens in i / 10 s: tpot = i / 100 s
    for i in range(1, 11):
        ttft = i / 10
        tel.record_finished(metrics(0.0, ttft, ttft + 10 * (i / 100), 11, cached=i), ["eos"])
    tel.record_finished(metrics(0.0, None, 5.0, 0), ["cancelled"])  # no token: no ttft
    tel.record_finished(metrics(0.0, 0.5, 0.6, 1), ["max_tokens", "max_tokens"])  # n=2, no tpot
    t = tel.totals()
    assert t.num_requests_finished == 12
    assert t.num_cached_tokens == 55
    assert t.stop_reasons == {"eos": 10, "cancelled": 1, "max_tokens": 2}
    ttfts = [i / 10 for i in range(1, 11)] + [0.5]
    tpots = [i / 100 for i in range(1, 11)]
    assert sorted(tel.ttfts) == pytest.approx(sorted(ttfts))
    assert sorted(tel.tpots) == pytest.approx(tpots)
    assert t.ttft_p50 == pytest.approx(nearest_rank(ttfts, 50))
    assert t.ttft_p95 == pytest.approx(nearest_rank(ttfts, 95))
    assert t.tpot_p50 == pytest.approx(nearest_rank(tpots, 50))  # 0.05: 5 of 10 at or below
    assert t.tpot_p95 == pytest.approx(nearest_rank(tpots, 95))


def test_step_history_is_bounded_but_totals_are_not():
    tel = Telemetry()
    for i in range(MAX_STEP_RECORDS + 10):
        tel.record_step(record(i, decode=1, duration=0.01, generated=1))
    assert len(tel.steps) == MAX_STEP_RECORDS
    assert tel.steps[0].step == 10 and tel.steps[-1].step == MAX_STEP_RECORDS + 9
    assert tel.totals().num_generated_tokens == MAX_STEP_RECORDS + 10


def test_totals_is_a_frozen_copy():
    tel = Telemetry()
    tel.record_finished(metrics(0.0, 0.1, 0.2, 2), ["eos"])
    t = tel.totals()
    tel.record_finished(metrics(0.0, 0.1, 0.2, 2), ["eos"])
    assert t.stop_reasons == {"eos": 1} and t.num_requests_finished == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.num_requests_finished = 5


# -- RequestMetrics derived numbers (what telemetry feeds on) ---------------------------------
def test_request_metrics_derived():
    m = metrics(10.0, 10.5, 12.5, 5)
    assert m.ttft == pytest.approx(0.5)
    assert m.e2e == pytest.approx(2.5)
    assert m.tpot == pytest.approx(0.5)  # 2 s over 4 gaps
    assert metrics(10.0, None, None, 0).ttft is None
    assert metrics(10.0, 10.5, None, 3).e2e is None and metrics(10.0, 10.5, None, 3).tpot is None
    assert metrics(10.0, 10.5, 11.0, 1).tpot is None


# -- EngineSnapshot ---------------------------------------------------------------------------
def snapshot(total, used, cached):
    return EngineSnapshot(
        step=3, num_waiting=1, num_running=2, num_finished=0, kv_blocks_total=total,
        kv_blocks_used=used, kv_blocks_cached=cached, block_size=4, kv_backend="paged",
        batching="continuous", scheduling_policy="fcfs", max_num_seqs=4, max_num_batched_tokens=16,
        requests=(), steps=(record(0),), totals=Totals(),
    )  # fmt: skip


def test_snapshot_kv_blocks_free():
    assert snapshot(16, 5, 3).kv_blocks_free == 8
    assert snapshot(16, 0, 0).kv_blocks_free == 16
    assert snapshot(16, 10, 6).kv_blocks_free == 0


def test_snapshot_is_immutable():
    s = snapshot(8, 1, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.kv_blocks_used = 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.steps[0].duration = 1.0
