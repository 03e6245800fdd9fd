"""Why a request waits and what its preemptions cost, in the words the board uses.

Pure functions of an engine RequestState (or its numbers); the cards, the timeline, the
inspector and the stat tiles share them so they always say the same thing.
"""

from engine import WaitingReason

WAITING_COLOURS = {
    WaitingReason.TOKEN_BUDGET: "#8b5cf6",
    WaitingReason.KV_BLOCKS: "#ef4444",
    WaitingReason.MAX_NUM_SEQS: "#3b82f6",
    WaitingReason.STATIC_BATCH: "#f59e0b",
    WaitingReason.PRIORITY: "#ec4899",
    WaitingReason.PREEMPTED: "#7f1d1d",
    WaitingReason.QUEUE_ORDER: "#94a3b8",
}


def waiting_label(reason: str | None) -> str | None:
    """'no free KV blocks' for 'kv_blocks'; None when the scheduler has not looked at it yet."""
    return WaitingReason(reason).label if reason else None


def preemption_cost(num_preemptions: int, num_recomputed: int, time_lost: float) -> str:
    """'preempted 2x, 96 tokens recomputed, +1.4 s' ('' when it never was)."""
    if not num_preemptions:
        return ""
    return f"preempted {num_preemptions}x, {num_recomputed} tokens recomputed, +{time_lost:.1f} s"


def state_cost(state) -> str:
    """preemption_cost() of a RequestState."""
    return preemption_cost(
        state.num_preemptions, state.num_recomputed_tokens, state.preemption_time_lost
    )


def cost_tag(state) -> str:
    """'+1.4 s ⟲2', what preemption cost a RequestState in short: the time it lost, the
    times it was preempted ('' when it never was)."""
    if not state.num_preemptions:
        return ""
    return f"+{state.preemption_time_lost:.1f} s ⟲{state.num_preemptions}"
