"""What preemption costs its victims: tokens recomputed and time lost, per preemption, per
request and in the totals."""

from engine import SamplingParams
from engine.preemption import PreemptionLog
from tests.engine.checks import assert_no_leak
from tests.tiny_models import make_engine


def test_a_preemption_costs_the_tokens_computed_again_and_the_time_until_back():
    log = PreemptionLog()
    log.computed(0, 10, now=1.0)  # a 10-token prompt
    log.computed(10, 1, now=1.1)
    log.preempted(step=5, num_computed=11, start=2.0)
    assert log.open is not None and log.time_lost(now=3.0) == 1.0
    assert log.computed(4, 4, now=3.5) == 4  # tokens 0-3 came from the prefix cache
    assert log.open is not None
    assert log.computed(8, 3, now=4.0) == 3  # back at 11: the span ends
    assert log.open is None and log.time_lost(now=99.0) == 2.0
    assert log.computed(11, 1, now=4.1) == 0  # new tokens are not recomputed ones
    assert log.num_recomputed_tokens == 7
    (p,) = log.events
    assert (p.step, p.num_dropped_tokens, p.num_recomputed_tokens) == (5, 11, 7)


def test_a_second_preemption_before_it_is_back_closes_the_first():
    log = PreemptionLog()
    log.computed(0, 8, now=0.0)
    log.preempted(1, 8, start=1.0)
    log.computed(0, 4, now=1.5)
    log.preempted(2, 4, start=2.0)  # only 4 were back: dropped again
    log.computed(0, 8, now=3.0)
    first, second = log.events
    assert first.time_lost == 1.0 and first.num_recomputed_tokens == 4
    assert second.time_lost == 1.0 and second.num_recomputed_tokens == 8
    log.preempted(3, 8, start=4.0)
    log.finished(now=4.5)  # cancelled while waiting: the loss ends with it
    assert log.events[-1].time_lost == 0.5 and log.open is None


def test_the_engine_counts_what_kv_pressure_costs(llama_pair, tokenizer):
    engine = make_engine(llama_pair[0], tokenizer, num_kv_blocks=12, max_num_batched_tokens=16)
    greedy = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    outs = {}
    for i in range(4):
        engine.add_request(f"p{i}", f"Prompt number {i} says", greedy)
    while engine.has_unfinished_requests():
        outs.update((o.request_id, o) for o in engine.step() if o.finished)
    victims = [o for o in outs.values() if o.metrics.num_preemptions]
    assert victims
    for out in victims:
        m = out.metrics
        assert m.num_recomputed_tokens > 0 and m.preemption_time_lost > 0
        detail = engine.inspect(out.request_id).seqs[0]
        assert sum(p[2] for p in detail.preemptions) == m.num_recomputed_tokens
        assert all(p[3] is not None for p in detail.preemptions)  # every span closed
        dropped = sum(p[1] for p in detail.preemptions)
        assert m.num_recomputed_tokens <= dropped
    snap = engine.snapshot()
    totals = snap.totals
    assert totals.num_recomputed_tokens == sum(o.metrics.num_recomputed_tokens for o in victims)
    lost = sum(o.metrics.preemption_time_lost for o in victims)
    assert abs(totals.preemption_time_lost - lost) < 1e-9
    states = {r.request_id: r for r in snap.requests}
    for out in victims:
        state = states[out.request_id]
        assert state.num_recomputed_tokens == out.metrics.num_recomputed_tokens
        assert len(state.preempted_spans) == state.num_preemptions
        assert abs(state.preemption_time_lost - out.metrics.preemption_time_lost) < 1e-9
    assert_no_leak(engine)
