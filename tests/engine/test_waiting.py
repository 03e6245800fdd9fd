"""Why a request waits: each WaitingReason, from a workload built to hit it, in the scheduler
and through the engine (the snapshot's request state, the step record, the inspector)."""

import pytest

from engine import SamplingParams, WaitingReason
from engine.waiting import WAITING_LABELS, explain_waiting
from tests.engine.test_block_manager import make_seq
from tests.engine.test_scheduler import make_scheduler, run_forward
from tests.tiny_models import make_engine

W = WaitingReason


def reasons(sched, out) -> list[WaitingReason]:
    """The reason of every waiting sequence, in queue order (each one has exactly one)."""
    assert set(out.waiting_reasons) == {s.seq_id for s in sched.waiting}
    return [out.waiting_reasons[s.seq_id] for s in sched.waiting]


def test_every_reason_has_a_label():
    assert set(WAITING_LABELS) == set(W)
    assert W.KV_BLOCKS.label == "no free KV blocks"


def test_max_num_seqs_reached_holds_the_head_and_those_behind():
    sched = make_scheduler(max_num_seqs=2, max_num_batched_tokens=64)
    for i in range(4):
        sched.add(make_seq(range(4), seq_id=i))
    out = sched.schedule()
    assert len(out.admitted) == 2
    assert reasons(sched, out) == [W.MAX_NUM_SEQS, W.MAX_NUM_SEQS]


def test_a_spent_token_budget_holds_everyone():
    sched = make_scheduler(max_num_batched_tokens=8, max_num_seqs=4)
    for i in range(3):
        sched.add(make_seq(range(10 * i, 10 * i + 8), seq_id=i))
    out = sched.schedule()  # the first prompt takes all 8 tokens of the budget
    assert [s.seq.seq_id for s in out.scheduled] == [0]
    assert reasons(sched, out) == [W.TOKEN_BUDGET, W.TOKEN_BUDGET]


def test_without_chunking_a_prompt_larger_than_the_budget_left_waits_for_budget():
    sched = make_scheduler(enable_chunked_prefill=False, max_num_batched_tokens=16)
    for i in range(3):
        sched.add(make_seq(range(10 * i, 10 * i + 10), seq_id=i))
    out = sched.schedule()  # 10 of 16 spent: the next 10-token prompt does not fit the 6 left
    assert reasons(sched, out) == [W.TOKEN_BUDGET, W.QUEUE_ORDER]


def test_no_free_kv_blocks_holds_the_head_and_the_queue_order_the_rest():
    sched = make_scheduler(num_blocks=6, max_num_batched_tokens=64)
    big, small = make_seq(range(16), seq_id=0), make_seq(range(20, 36), seq_id=1)
    tiny = make_seq(range(40, 42), seq_id=2)
    for seq in (big, small, tiny):
        sched.add(seq)
    out = sched.schedule()  # 4 blocks for the first; the second needs 4 of the 2 left
    assert out.admitted == [big]
    assert reasons(sched, out) == [W.KV_BLOCKS, W.QUEUE_ORDER]  # tiny would fit: FCFS holds it


def test_static_batching_waits_for_the_batch_to_drain():
    sched = make_scheduler(batching="static", max_num_seqs=2, max_num_batched_tokens=64)
    for i in range(2):
        sched.add(make_seq(range(4), seq_id=i))
    run_forward(sched.schedule())
    sched.add(make_seq(range(4), seq_id=2))
    out = sched.schedule()  # two decode: the newcomer waits for the batch, not for a seat
    assert reasons(sched, out) == [W.STATIC_BATCH]
    sched = make_scheduler(batching="static", max_num_seqs=4, max_num_batched_tokens=64)
    sched.add(make_seq(range(4), seq_id=0))
    run_forward(sched.schedule())
    sched.add(make_seq(range(4), seq_id=1))
    out = sched.schedule()  # three free seats, budget left: static still holds it back
    assert reasons(sched, out) == [W.STATIC_BATCH]


def test_behind_a_higher_priority_request():
    sched = make_scheduler(num_blocks=6, max_num_batched_tokens=64, scheduling_policy="priority")
    running = make_seq(range(16), seq_id=0)
    sched.add(running)
    run_forward(sched.schedule())  # 4 of 6 blocks held
    urgent, later = make_seq(range(20, 36), seq_id=1), make_seq(range(40, 42), seq_id=2)
    sched.add(later, priority=5)
    sched.add(urgent, priority=0)  # goes ahead of `later`, and does not fit
    out = sched.schedule()
    assert [s.seq_id for s in sched.waiting] == [1, 2]
    assert reasons(sched, out) == [W.KV_BLOCKS, W.PRIORITY]


def test_a_preempted_sequence_waits_as_preempted_until_it_runs_again():
    sched = make_scheduler(num_blocks=5, max_num_batched_tokens=16)
    a, b = make_seq(range(8), seq_id=0), make_seq(range(10, 18), seq_id=1)
    c = make_seq(range(20, 22), seq_id=2)
    sched.add(a)
    sched.add(b)
    run_forward(sched.schedule())
    sched.add(c)
    out = sched.schedule()  # b is preempted for a's next block; no admission this step
    assert out.preempted == [b]
    assert reasons(sched, out) == [W.PREEMPTED, W.KV_BLOCKS]
    run_forward(out)
    out = sched.schedule()
    assert reasons(sched, out)[0] == W.PREEMPTED  # still out: still "preempted"
    assert b.waiting_reason is None  # the engine notes it on the sequence, not the scheduler


def test_explain_waiting_orders_its_rules():
    seqs = [make_seq(range(4), seq_id=i) for i in range(3)]
    seqs[2].params = SamplingParams(n=4)  # wants 4 seats
    got = explain_waiting(seqs, {0: 0, 1: 3, 2: 3}, None, W.KV_BLOCKS, free_seats=2)
    assert got == {0: W.KV_BLOCKS, 1: W.PRIORITY, 2: W.MAX_NUM_SEQS}
    fcfs = explain_waiting(seqs[:2], {0: 0, 1: 3}, None, W.KV_BLOCKS, 2, by_priority=False)
    assert fcfs == {0: W.KV_BLOCKS, 1: W.QUEUE_ORDER}
    assert set(explain_waiting(seqs, {}, W.STATIC_BATCH).values()) == {W.STATIC_BATCH}


# -- through the engine ------------------------------------------------------------------------
GREEDY = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)


@pytest.fixture
def engine(llama_pair, tokenizer):
    return make_engine(llama_pair[0], tokenizer, max_num_seqs=2, max_num_batched_tokens=64)


def test_the_engine_shows_why_each_request_waits(engine):
    for i in range(4):
        engine.add_request(f"r{i}", f"Prompt number {i} says", GREEDY)
    snap = engine.snapshot()
    assert {r.waiting_reason for r in snap.requests} == {None}  # not looked at yet
    engine.step()
    snap = engine.snapshot()
    by_id = {r.request_id: r for r in snap.requests}
    assert by_id["r0"].waiting_reason is None and by_id["r0"].status == "running"
    assert by_id["r2"].waiting_reason == by_id["r3"].waiting_reason == "max_num_seqs"
    assert snap.steps[-1].waiting_by_reason == (("max_num_seqs", 2),)
    while engine.has_unfinished_requests():
        engine.step()
    detail = engine.inspect("r3")
    (reason, first, last), *_ = detail.seqs[0].waiting_history
    assert reason == "max_num_seqs" and first == 1 and last >= 6  # r0, r1 decode 6 steps
    assert engine.snapshot().steps[-1].waiting_by_reason == ()


def test_waiting_counts_add_up_to_the_waiting_queue(llama_pair, tokenizer):
    engine = make_engine(llama_pair[0], tokenizer, num_kv_blocks=14, max_num_batched_tokens=16)
    for i in range(6):
        engine.add_request(f"p{i}", f"Prompt number {i} says something long", GREEDY)
    seen = set()
    while engine.has_unfinished_requests():
        engine.step()
        rec = engine.snapshot().steps[-1]
        assert sum(n for _, n in rec.waiting_by_reason) == rec.num_waiting
        seen.update(r for r, _ in rec.waiting_by_reason)
    assert {"token_budget", "preempted"} <= seen
