"""Scheduler: which sequences run in the next step, and how many of their tokens.

Every sequence has `num_tokens` (prompt + output) and `num_computed_tokens` (K/V in the
cache); a step computes some of the difference. A decode is the case "one token left"; a
prompt, or a preempted sequence being recomputed, may take several steps (chunked prefill).
"""

from collections import deque
from dataclasses import dataclass, field

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.sequence import Sequence, SequenceStatus
from engine.waiting import WaitingReason, explain_waiting


@dataclass(slots=True)
class ScheduledSequence:
    """One sequence's share of a step; the facts are fixed when it is scheduled."""

    seq: Sequence
    num_new_tokens: int  # computed this step, starting at seq.num_computed_tokens
    is_decode: bool = field(init=False)  # just the last token: its context is all cached
    samples: bool = field(init=False)  # reaches the last token, so a new token is sampled

    def __post_init__(self):
        uncomputed = self.seq.num_uncomputed_tokens
        self.is_decode = self.num_new_tokens == 1 and uncomputed == 1
        self.samples = self.num_new_tokens == uncomputed


@dataclass(slots=True)
class SchedulerOutputs:
    scheduled: list[ScheduledSequence] = field(default_factory=list)  # decodes first
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)  # (src, dst), CoW
    admitted: list[Sequence] = field(default_factory=list)  # moved WAITING -> RUNNING now
    preempted: list[Sequence] = field(default_factory=list)  # moved RUNNING -> WAITING now
    # seq_id -> why each sequence still waiting was kept out this step (engine/waiting.py)
    waiting_reasons: dict[int, WaitingReason] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled

    @property
    def num_decode_tokens(self) -> int:
        return sum(1 for s in self.scheduled if s.is_decode)

    @property
    def num_prefill_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled if not s.is_decode)


class Scheduler:
    def __init__(self, config: EngineConfig, block_manager: BlockManager):
        self.config = config
        self.block_manager = block_manager
        # Waiting: sequences holding no blocks, never run or preempted. Ordered by priority
        # (lower first), then arrival; preempted sequences go back to the very front.
        self.waiting: deque[Sequence] = deque()
        # Running: admitted sequences, holding blocks, in admission order (the tail is the
        # most recently admitted, the first to be preempted).
        self.running: list[Sequence] = []
        self.priorities: dict[int, int] = {}  # seq_id -> priority
        self.watermark_blocks = max(1, block_manager.num_blocks // 100)  # kept free by admission

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running)

    def add(self, seq: Sequence, priority: int = 0) -> None:
        self.priorities[seq.seq_id] = priority
        i = len(self.waiting)
        while i > 0 and self.priorities[self.waiting[i - 1].seq_id] > priority:
            i -= 1
        self.waiting.insert(i, seq)

    def add_running(self, seq: Sequence, priority: int = 0) -> None:
        """A forked sibling joins its parent in running (it already shares the parent's blocks)."""
        self.priorities[seq.seq_id] = priority
        self.running.append(seq)

    def finish(self, seq: Sequence) -> None:
        """Forget a finished sequence and free its blocks."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.block_manager.free(seq)
        self.priorities.pop(seq.seq_id, None)

    def schedule(self) -> SchedulerOutputs:
        """Pick this step's batch under max_num_seqs and the token budget.

        Running sequences come first (decodes, then the next chunk of unfinished prompts),
        then waiting ones are admitted. Mutates the queues, the sequences' block tables and
        the block manager; `num_computed_tokens` is advanced by the engine after the forward.
        """
        out = SchedulerOutputs()
        budget = self.config.max_num_batched_tokens
        chunked = self.config.enable_chunked_prefill
        was_idle = not self.running
        scheduled_ids: set[int] = set()

        by_phase = sorted(self.running, key=lambda s: s.is_prefill)  # stable: decodes first
        for seq in by_phase:
            if seq.status != SequenceStatus.RUNNING or budget == 0:
                continue  # preempted as a victim earlier in this loop, or no budget left
            num_new = min(seq.num_uncomputed_tokens, budget)
            if num_new < seq.num_uncomputed_tokens and not chunked:
                continue
            while not self.block_manager.can_allocate(seq, num_new):
                victim = next(
                    (s for s in reversed(self.running) if s.seq_id not in scheduled_ids), None
                )
                self._preempt(victim, out)
                if victim is seq:
                    break
            else:
                out.blocks_to_copy += self.block_manager.allocate(seq, num_new)
                out.scheduled.append(ScheduledSequence(seq, num_new))
                scheduled_ids.add(seq.seq_id)
                budget -= num_new

        static = self.config.scheduling_policy == "static"
        if out.preempted or (static and not was_idle):
            step_reason = WaitingReason.KV_BLOCKS if out.preempted else WaitingReason.STATIC_BATCH
            out.waiting_reasons = explain_waiting(self.waiting, self.priorities, step_reason)
            return out
        # A prompt not yet sampled holds the seats of the n - 1 siblings it will fork, so
        # forks never push the running batch past max_num_seqs.
        num_seats = sum(s.max_num_running_seqs for s in self.running)
        step_reason = head_reason = None  # why the admission loop stopped
        while self.waiting:
            if budget == 0 and not static:
                step_reason = WaitingReason.TOKEN_BUDGET
                break
            seq = self.waiting[0]
            if num_seats + seq.max_num_running_seqs > self.config.max_num_seqs:
                head_reason = WaitingReason.MAX_NUM_SEQS
                break
            computed = self.block_manager.get_computed_blocks(seq)
            num_uncomputed = seq.num_tokens - len(computed) * self.block_manager.block_size
            num_new = min(num_uncomputed, budget)
            if num_new < num_uncomputed and not chunked and not (static and num_new == 0):
                head_reason = WaitingReason.TOKEN_BUDGET
                break
            reserve = num_uncomputed if static else num_new  # static admits whole prompts
            if not self._can_admit(seq, reserve, computed):
                head_reason = WaitingReason.KV_BLOCKS
                break
            self.waiting.popleft()
            out.blocks_to_copy += self.block_manager.allocate(seq, num_new, computed)
            seq.set_status(SequenceStatus.RUNNING)
            self.running.append(seq)
            num_seats += seq.max_num_running_seqs
            out.admitted.append(seq)
            if num_new:
                out.scheduled.append(ScheduledSequence(seq, num_new))
                budget -= num_new
        # The queue is ordered by priority, so by_priority holds; a first-come-first-served
        # order (a scheduling policy that ignores priorities) would pass by_priority=False.
        free_seats = self.config.max_num_seqs - num_seats
        out.waiting_reasons = explain_waiting(
            self.waiting, self.priorities, step_reason, head_reason, free_seats, by_priority=True
        )
        return out

    def _can_admit(self, seq: Sequence, num_new: int, computed: list[int]) -> bool:
        bm = self.block_manager
        needed = bm.num_blocks_needed(seq, num_new, computed)
        if not self.running:  # an idle engine admits whatever fits
            return needed <= bm.num_free_blocks
        return needed + self.watermark_blocks <= bm.num_free_blocks

    def _preempt(self, seq: Sequence, out: SchedulerOutputs) -> None:
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.preempt()
        self.waiting.appendleft(seq)
        out.preempted.append(seq)
