"""Scheduler: decodes first, chunked prefill under the budget, policies, preemption."""

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.detokenizer import IncrementalDetokenizer
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from engine.sequence import Sequence, SequenceStatus
from tests.engine.test_block_manager import make_seq


def make_scheduler(num_blocks=64, **overrides):
    config = EngineConfig(
        **{**dict(block_size=4, max_num_batched_tokens=16, max_num_seqs=4), **overrides}
    )
    return Scheduler(
        config, BlockManager(num_blocks, config.block_size, config.enable_prefix_caching)
    )


def run_forward(out, token=7):
    """Stand-in for the engine after a forward: advance progress, sample where due."""
    for s in out.scheduled:
        samples = s.samples
        s.seq.num_computed_tokens += s.num_new_tokens
        if samples:
            s.seq.output_token_ids.append(token)


def test_chunked_prefill_spans_steps_while_others_decode():
    sched = make_scheduler()
    short, long = make_seq(range(3), seq_id=0), make_seq(range(100, 140), seq_id=1)
    sched.add(short)
    sched.add(long)
    out = sched.schedule()
    assert [(s.seq.seq_id, s.num_new_tokens) for s in out.scheduled] == [(0, 3), (1, 13)]
    run_forward(out)
    out = sched.schedule()  # the short one decodes first, the long prompt takes the rest
    assert [(s.seq.seq_id, s.num_new_tokens, s.is_decode) for s in out.scheduled] == [
        (0, 1, True),
        (1, 15, False),
    ]
    assert not out.scheduled[1].samples
    run_forward(out)
    out = sched.schedule()
    assert [(s.seq.seq_id, s.num_new_tokens) for s in out.scheduled] == [(0, 1), (1, 12)]
    assert out.scheduled[1].samples  # the prompt's last chunk samples its first token


def test_max_num_seqs_and_priority_order_admission():
    sched = make_scheduler(max_num_seqs=2, max_num_batched_tokens=64, scheduling_policy="priority")
    for i, priority in enumerate([5, 0, 1]):
        sched.add(make_seq(range(4), seq_id=i), priority)
    out = sched.schedule()
    assert [s.seq.seq_id for s in out.scheduled] == [1, 2]  # lower priority value first
    assert [s.seq_id for s in sched.waiting] == [0]


def make_group_seq(token_ids, seq_id, n):
    """The first sequence of a request with n completions (the other n - 1 fork from it)."""
    detok = IncrementalDetokenizer(None, [], False)
    return Sequence(seq_id, 0, list(token_ids), SamplingParams(n=n), detok, frozenset(), 1024)


def fork(sched, parent, seq_id, index):
    """What the engine does with a parent's first token: the sibling joins running."""
    child = parent.fork(seq_id, index, IncrementalDetokenizer(None, [], False), None)
    sched.block_manager.fork(parent, child)
    sched.add_running(child, parent)
    return child


def test_a_prompt_takes_a_seat_for_each_of_its_n_completions():
    sched = make_scheduler(max_num_seqs=4, max_num_batched_tokens=64)
    a, b = make_group_seq(range(4), 0, n=3), make_group_seq(range(10, 14), 1, n=2)
    c = make_seq(range(20, 24), seq_id=2)
    for seq in (a, b, c):
        sched.add(seq)
    out = sched.schedule()
    assert out.admitted == [a]  # 3 seats; b needs 2 of the 1 left, c queues behind b
    run_forward(out)
    siblings = [fork(sched, a, 3, 1), fork(sched, a, 4, 2)]
    out = sched.schedule()
    assert len(out.scheduled) == 3 and not out.admitted
    run_forward(out)
    siblings[0].finish("max_tokens")
    sched.finish(siblings[0])
    out = sched.schedule()
    assert out.admitted == [b] and len(out.scheduled) == 3  # b's prompt holds 2 seats
    assert [s.seq_id for s in sched.waiting] == [2]


def test_static_policy_admits_a_new_batch_only_when_running_is_empty():
    sched = make_scheduler(batching="static", max_num_batched_tokens=8)
    a, b = make_seq(range(6), seq_id=0), make_seq(range(6), seq_id=1)
    sched.add(a)
    sched.add(b)
    out = sched.schedule()
    assert out.admitted == [a, b]  # the whole batch is admitted, its prefill chunked
    assert [(s.seq.seq_id, s.num_new_tokens) for s in out.scheduled] == [(0, 6), (1, 2)]
    run_forward(out)
    c = make_seq(range(3), seq_id=2)
    sched.add(c)
    for _ in range(5):
        out = sched.schedule()
        assert c.status == SequenceStatus.WAITING and c not in out.admitted
        run_forward(out)
    for seq in (a, b):
        seq.finish("eos")
        sched.finish(seq)
    assert sched.schedule().admitted == [c]


def test_continuous_policy_admits_while_others_run():
    sched = make_scheduler()
    a = make_seq(range(6), seq_id=0)
    sched.add(a)
    run_forward(sched.schedule())
    b = make_seq(range(3), seq_id=1)
    sched.add(b)
    assert sched.schedule().admitted == [b]


def test_out_of_blocks_preempts_the_most_recent_and_recovers():
    sched = make_scheduler(num_blocks=5, max_num_batched_tokens=16)
    a, b = make_seq(range(8), seq_id=0), make_seq(range(10, 18), seq_id=1)
    sched.add(a)
    sched.add(b)
    run_forward(sched.schedule())  # 8 prompt tokens each: 2 full blocks each
    assert sched.block_manager.num_free_blocks == 1
    out = sched.schedule()  # both need a 3rd block: a takes the last, b (admitted last) yields
    assert out.preempted == [b]
    assert b.status == SequenceStatus.WAITING and b.num_preemptions == 1
    assert b.num_computed_tokens == 0 and b.block_table == []
    assert sched.waiting[0] is b and [s.seq for s in out.scheduled] == [a]
    run_forward(out)
    a.finish("max_tokens")
    sched.finish(a)
    out = sched.schedule()  # b comes back and recomputes prompt + its sampled token
    assert out.admitted == [b] and out.scheduled[0].num_new_tokens == b.num_tokens
    sched.block_manager.check_invariants([b])


def test_a_lone_sequence_that_does_not_fit_preempts_itself_instead_of_looping():
    sched = make_scheduler(num_blocks=2)
    a = make_seq(range(8), seq_id=0)
    sched.add(a)
    run_forward(sched.schedule())
    out = sched.schedule()
    assert out.preempted == [a] and out.scheduled == []


def test_no_chunking_waits_for_a_budget_that_fits_the_whole_prompt():
    sched = make_scheduler(enable_chunked_prefill=False, max_num_batched_tokens=16)
    a, b = make_seq(range(10), seq_id=0), make_seq(range(10), seq_id=1)
    sched.add(a)
    sched.add(b)
    out = sched.schedule()
    assert [s.seq for s in out.scheduled] == [a]  # b's 10 tokens do not fit the 6 left
