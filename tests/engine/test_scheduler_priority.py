"""The "priority" scheduling policy: waiting order, victims, preemption for a waiting request."""

import pytest

from engine.sequence import SequenceStatus
from tests.engine.test_block_manager import make_seq
from tests.engine.test_scheduler import make_scheduler, run_forward


def add(sched, seq_id, priority, arrival, num_tokens=4):
    seq = make_seq(range(seq_id * 10, seq_id * 10 + num_tokens), seq_id=seq_id)
    sched.add(seq, priority, arrival)
    return seq


def ids(seqs):
    return [s.seq_id for s in seqs]


def test_waiting_is_ordered_by_priority_then_arrival():
    sched = make_scheduler(scheduling_policy="priority")
    for seq_id, priority, arrival in [(0, 1, 0.0), (1, 0, 3.0), (2, 1, -1.0), (3, 0, 2.0)]:
        add(sched, seq_id, priority, arrival)
    assert ids(sched.waiting) == [3, 1, 2, 0]


def test_fcfs_keeps_arrival_order_whatever_the_priority():
    sched = make_scheduler()
    for seq_id, priority in [(0, 5), (1, 0), (2, 1)]:
        add(sched, seq_id, priority, float(seq_id))
    assert ids(sched.waiting) == [0, 1, 2]


def test_out_of_blocks_the_victim_is_the_largest_priority_and_arrival():
    # 3 requests of 4 tokens in 1 block each; the fourth token of each needs a second block
    sched = make_scheduler(num_blocks=5, scheduling_policy="priority", max_num_seqs=3)
    low_old, high, low_new = add(sched, 0, 2, 0.0), add(sched, 1, 0, 1.0), add(sched, 2, 2, 2.0)
    run_forward(sched.schedule())  # all three admitted: 3 blocks, 2 free
    out = sched.schedule()  # each needs a new block for its 5th token: one must go
    assert ids(out.preempted) == [2]  # (2, 2.0) is the largest key
    assert low_old.status == high.status == SequenceStatus.RUNNING
    assert low_new.status == SequenceStatus.WAITING


def test_fcfs_victim_is_the_most_recently_admitted():
    sched = make_scheduler(num_blocks=5, max_num_seqs=3)
    add(sched, 0, 0, 0.0), add(sched, 1, 0, 1.0), add(sched, 2, 0, 2.0)
    run_forward(sched.schedule())
    assert ids(sched.schedule().preempted) == [2]


def test_priority_victim_is_not_the_most_recently_admitted():
    sched = make_scheduler(num_blocks=5, scheduling_policy="priority", max_num_seqs=3)
    add(sched, 0, 3, 0.0)  # the lowest priority, admitted first
    run_forward(sched.schedule())
    add(sched, 1, 0, 1.0), add(sched, 2, 0, 2.0)
    run_forward(sched.schedule())  # 1 and 2 admitted; each request holds 1 or 2 blocks
    victims = []
    for _ in range(3):
        out = sched.schedule()
        victims += ids(out.preempted)
        run_forward(out)
    assert victims and victims[0] == 0  # never a priority-0 request while 0 holds blocks


def test_a_higher_priority_request_preempts_when_only_max_num_seqs_keeps_it_out():
    sched = make_scheduler(num_blocks=64, scheduling_policy="priority", max_num_seqs=2)
    a, _ = add(sched, 0, 1, 0.0), add(sched, 1, 2, 1.0)
    run_forward(sched.schedule())
    assert sched.block_manager.num_free_blocks > 50  # plenty of blocks: seats are the limit
    vip = add(sched, 2, 0, 5.0)
    out = sched.schedule()
    assert ids(out.preempted) == [1] and vip in out.admitted  # b: the largest (priority, arrival)
    assert a.status == SequenceStatus.RUNNING and ids(sched.waiting) == [1]


def test_a_higher_priority_request_preempts_when_blocks_keep_it_out():
    sched = make_scheduler(
        num_blocks=6, scheduling_policy="priority", max_num_seqs=4, max_num_batched_tokens=12
    )
    low = add(sched, 0, 5, 0.0, num_tokens=12)  # 3 of the 6 blocks; its 13th token needs a 4th
    run_forward(sched.schedule())
    vip = add(sched, 1, 0, 1.0, num_tokens=12)  # 3 blocks: 3 free, less the watermark
    out = sched.schedule()
    assert out.preempted == [low] and vip in out.admitted
    assert low.status == SequenceStatus.WAITING and low.num_preemptions == 1


@pytest.mark.parametrize("priority", [0, 1])
def test_an_equal_or_lower_priority_request_never_preempts(priority):
    sched = make_scheduler(num_blocks=64, scheduling_policy="priority", max_num_seqs=1)
    running = add(sched, 0, 0, 0.0)
    run_forward(sched.schedule())
    add(sched, 1, priority, 1.0)
    out = sched.schedule()
    assert not out.preempted and not out.admitted and running.status == SequenceStatus.RUNNING


def test_a_preempted_request_keeps_its_priority_and_arrival():
    sched = make_scheduler(num_blocks=64, scheduling_policy="priority", max_num_seqs=1)
    old = add(sched, 0, 1, 0.0)
    run_forward(sched.schedule())
    add(sched, 1, 1, 2.0)  # same priority, arrived later: waits behind `old` once preempted
    add(sched, 2, 0, 3.0)  # the VIP
    out = sched.schedule()
    assert out.preempted == [old] and ids(out.admitted) == [2]
    assert ids(sched.waiting) == [0, 1]  # (1, 0.0) before (1, 2.0): not sent to the back


def test_static_batching_does_not_preempt_for_a_waiting_request():
    sched = make_scheduler(scheduling_policy="priority", batching="static", max_num_seqs=1)
    running = add(sched, 0, 5, 0.0)
    run_forward(sched.schedule())
    add(sched, 1, 0, 1.0)
    assert not sched.schedule().preempted and running.status == SequenceStatus.RUNNING
