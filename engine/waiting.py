"""WaitingReason: why a waiting request was not scheduled in a step.

Every step the scheduler names, for every sequence it leaves in the waiting queue, the first
rule that kept it out, in the order the scheduler applies its rules:

1. `preempted`: it was running and was preempted (its KV blocks freed); it waits to be
   readmitted and recomputed. Sticky until it runs again, whatever else holds it back.
2. Rules that hold for the whole step, before the queue is looked at: `static_batch` (static
   batching admits a new batch only once the running one has drained), `kv_blocks` in a
   step that preempted (no admission while blocks are short), `token_budget` when the
   running sequences spent the whole `max_num_batched_tokens`.
3. The head of the queue: the rule it failed, `max_num_seqs` (its seats would pass
   `max_num_seqs`), `token_budget` (its prompt does not fit the budget left and chunked
   prefill is off) or `kv_blocks` (not enough free blocks for it, the watermark included).
4. Behind the head, which the scheduler never reaches (it does not let a request overtake):
   `max_num_seqs` if its own seats would not fit either, else `priority` when a request
   ahead of it has a higher priority (a lower value; the queue is ordered by priority, then
   arrival), else `queue_order`.

vLLM exports the count as `vllm:num_requests_waiting_by_reason{reason}` with two coarse
values, `capacity` (no room: every reason here but two) and `deferred` (held back although
there may be room: `static_batch`, `priority`): `WaitingReason.vllm_reason`. /metrics
exports those under vLLM's name, and ours under `cb_playground:`.
"""

import enum
from collections.abc import Iterable


class WaitingReason(enum.StrEnum):
    TOKEN_BUDGET = "token_budget"  # max_num_batched_tokens spent (or too small, no chunking)
    KV_BLOCKS = "kv_blocks"  # not enough free KV blocks
    MAX_NUM_SEQS = "max_num_seqs"  # the batch holds max_num_seqs sequences
    STATIC_BATCH = "static_batch"  # static batching: the running batch has not drained
    PRIORITY = "priority"  # behind a request of higher priority
    PREEMPTED = "preempted"  # preempted: recompute pending
    QUEUE_ORDER = "queue_order"  # behind an earlier request that was kept out

    @property
    def label(self) -> str:
        return WAITING_LABELS[self]

    @property
    def vllm_reason(self) -> str:
        """vLLM's coarser value: `deferred` (a policy holds it back), else `capacity`."""
        deferred = self in (WaitingReason.STATIC_BATCH, WaitingReason.PRIORITY)
        return "deferred" if deferred else "capacity"


WAITING_LABELS = {
    WaitingReason.TOKEN_BUDGET: "token budget spent",
    WaitingReason.KV_BLOCKS: "no free KV blocks",
    WaitingReason.MAX_NUM_SEQS: "max_num_seqs reached",
    WaitingReason.STATIC_BATCH: "static batch draining",
    WaitingReason.PRIORITY: "behind a higher priority",
    WaitingReason.PREEMPTED: "preempted, recompute pending",
    WaitingReason.QUEUE_ORDER: "waiting-queue order",
}


def explain_waiting(
    waiting: Iterable,
    priorities: dict[int, int],
    step_reason: WaitingReason | None = None,
    head_reason: WaitingReason | None = None,
    free_seats: int | None = None,
    by_priority: bool = True,
) -> dict[int, WaitingReason]:
    """seq_id -> the first rule that kept that waiting sequence out (see the module docstring).

    `step_reason` holds for every sequence; otherwise `head_reason` is the head's, and
    `free_seats` (max_num_seqs minus the seats taken) tells those behind it if they would fit.
    `by_priority`: the queue is ordered by priority, so a request behind one of higher
    priority waits for that reason (a first-come-first-served order would pass False).
    """
    reasons: dict[int, WaitingReason] = {}
    best_ahead = None  # the highest priority (lowest value) among the sequences ahead
    for i, seq in enumerate(waiting):
        priority = priorities.get(seq.seq_id, 0)
        if seq.num_preemptions:
            reason = WaitingReason.PREEMPTED
        elif step_reason is not None:
            reason = step_reason
        elif i == 0:
            reason = head_reason or WaitingReason.QUEUE_ORDER
        elif free_seats is not None and seq.max_num_running_seqs > free_seats:
            reason = WaitingReason.MAX_NUM_SEQS
        elif by_priority and best_ahead is not None and best_ahead < priority:
            reason = WaitingReason.PRIORITY
        else:
            reason = WaitingReason.QUEUE_ORDER
        reasons[seq.seq_id] = reason
        best_ahead = priority if best_ahead is None else min(best_ahead, priority)
    return reasons
