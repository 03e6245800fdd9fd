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
        self.by_priority = config.scheduling_policy == "priority"
        # Waiting: sequences holding no blocks, never run or preempted. "fcfs": in arrival
        # order, preempted ones back at the very front; "priority": by (priority, arrival),
        # preempted ones too (they keep both).
        self.waiting: deque[Sequence] = deque()
        # Running: admitted sequences, holding blocks, in admission order (under "fcfs" the
        # tail, the most recently admitted, is the first to be preempted).
        self.running: list[Sequence] = []
        self.keys: dict[int, tuple[int, float]] = {}  # seq_id -> (priority, arrival)
        self.watermark_blocks = max(1, block_manager.num_blocks // 100)  # kept free by admission

    def add(self, seq: Sequence, priority: int = 0, arrival: float = 0.0) -> None:
        self.keys[seq.seq_id] = (priority, arrival)
        self._enqueue(seq, front=False)

    def add_running(self, seq: Sequence, parent: Sequence) -> None:
        """A forked sibling joins its parent in running (it already shares the parent's blocks)."""
        self.keys[seq.seq_id] = self.keys[parent.seq_id]
        self.running.append(seq)

    def finish(self, seq: Sequence) -> None:
        """Forget a finished sequence and free its blocks."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.block_manager.free(seq)
        self.keys.pop(seq.seq_id, None)

    def schedule(self) -> SchedulerOutputs:
        """Pick this step's batch under max_num_seqs and the token budget.

        Under "priority" a waiting request first preempts running ones of a lower priority
        that keep it out (seats or blocks). Then running sequences (decodes, then the next
        chunk of unfinished prompts), then waiting ones are admitted. The beams of one
        request are admitted and preempted together. Mutates the queues, the sequences' block
        tables and the block manager; `num_computed_tokens` is advanced by the engine after
        the forward.
        """
        out = SchedulerOutputs()
        static = self.config.batching == "static"
        if self.by_priority and not static:
            self._preempt_for_waiting(out)
        was_idle = not self.running
        budget, short_of_blocks = self._schedule_running(out)
        if short_of_blocks or (static and not was_idle):
            step_reason = WaitingReason.KV_BLOCKS if short_of_blocks else WaitingReason.STATIC_BATCH
            out.waiting_reasons = self._explain_waiting(step_reason)
            return out
        self._schedule_waiting(out, budget, static)
        return out

    def _schedule_running(self, out: SchedulerOutputs) -> tuple[int, bool]:
        """Schedule the running sequences, decodes first, preempting victims when blocks run
        out. Appends to `out` in place; returns the token budget left and whether blocks ran
        short."""
        budget = self.config.max_num_batched_tokens
        chunked = self.config.enable_chunked_prefill
        scheduled: dict[int, ScheduledSequence] = {}
        short_of_blocks = False
        for seq in sorted(self.running, key=self._running_order):  # decodes first
            if seq.status != SequenceStatus.RUNNING or budget == 0:
                continue  # preempted as a victim earlier in this loop, or no budget left
            num_new = min(seq.num_uncomputed_tokens, budget)
            if num_new < seq.num_uncomputed_tokens and not chunked:
                continue
            while not self.block_manager.can_allocate(seq, num_new):
                short_of_blocks = True
                candidates = [s for s in self.running if s.seq_id not in scheduled]
                budget += self._preempt(self._victim(candidates), out, scheduled)
                if seq.status != SequenceStatus.RUNNING:
                    break  # the victim was this sequence (or its request)
            else:
                out.blocks_to_copy += self.block_manager.allocate(seq, num_new)
                scheduled[seq.seq_id] = ScheduledSequence(seq, num_new)
                out.scheduled.append(scheduled[seq.seq_id])
                budget -= num_new
        return budget, short_of_blocks

    def _schedule_waiting(self, out: SchedulerOutputs, budget: int, static: bool) -> None:
        """Admit waiting requests in queue order while seats, budget and blocks allow, and
        name why the others wait. Appends to `out` in place."""
        chunked = self.config.enable_chunked_prefill
        # A prompt not yet sampled holds the seats of the siblings it will fork, so forks
        # never push the running batch past max_num_seqs.
        num_seats = sum(s.max_num_running_seqs for s in self.running)
        step_reason = head_reason = None  # why the admission loop stopped
        while self.waiting:
            if budget == 0 and not static:
                step_reason = WaitingReason.TOKEN_BUDGET
                break
            unit = self._waiting_unit(self.waiting[0])
            if num_seats + sum(s.max_num_running_seqs for s in unit) > self.config.max_num_seqs:
                head_reason = WaitingReason.MAX_NUM_SEQS
                break
            plan = self._plan_admission(unit, budget, static, chunked)
            if isinstance(plan, WaitingReason):
                head_reason = plan
                break
            for seq, num_new, computed in plan:
                self.waiting.remove(seq)
                out.blocks_to_copy += self.block_manager.allocate(seq, num_new, computed)
                seq.set_status(SequenceStatus.RUNNING)
                self.running.append(seq)
                num_seats += seq.max_num_running_seqs
                out.admitted.append(seq)
                if num_new:
                    out.scheduled.append(ScheduledSequence(seq, num_new))
                    budget -= num_new
        free_seats = self.config.max_num_seqs - num_seats
        out.waiting_reasons = self._explain_waiting(step_reason, head_reason, free_seats)

    def _plan_admission(self, unit: list[Sequence], budget: int, static: bool, chunked: bool):
        """(seq, num_new_tokens, computed_blocks) for each sequence of `unit` if all of them
        can be admitted now, else the WaitingReason that keeps them out."""
        bm, plan, needed, revived = self.block_manager, [], 0, set()
        for seq in unit:
            computed = bm.get_computed_blocks(seq)
            num_uncomputed = seq.num_tokens - len(computed) * bm.block_size
            num_new = min(num_uncomputed, budget)
            if num_new < num_uncomputed and not chunked and not (static and num_new == 0):
                return WaitingReason.TOKEN_BUDGET
            reserve = num_uncomputed if static else num_new  # static admits whole prompts
            needed += bm.num_blocks_needed(seq, reserve, computed)
            cached = {b for b in computed if bm.blocks[b].ref_count == 0}
            needed -= len(cached & revived)  # beams share their cached prefix: revived once
            revived |= cached
            plan.append((seq, num_new, computed))
            budget -= num_new
        return plan if self._can_reserve(needed) else WaitingReason.KV_BLOCKS

    def _explain_waiting(self, step_reason=None, head_reason=None, free_seats=None):
        """seq_id -> why each waiting sequence was kept out this step (engine/waiting.py)."""
        priorities = {s.seq_id: self.keys[s.seq_id][0] for s in self.waiting}
        return explain_waiting(self.waiting, priorities, step_reason, head_reason, free_seats,
                               by_priority=self.by_priority)  # fmt: skip

    def _can_reserve(self, num_blocks: int) -> bool:
        free = self.block_manager.num_free_blocks
        if not self.running:  # an idle engine admits whatever fits
            return num_blocks <= free
        return num_blocks + self.watermark_blocks <= free

    def _preempt_for_waiting(self, out: SchedulerOutputs) -> None:
        """Preempt running sequences of a lower priority (largest (priority, arrival) first)
        while they keep the head of the waiting queue out, by seats or by blocks."""
        if not self.waiting:
            return
        head = self.waiting[0]
        unit, key = self._waiting_unit(head), self.keys[head.seq_id]
        chunk = self.config.max_num_batched_tokens
        while lower := [s for s in self.running if self.keys[s.seq_id] > key]:
            num_seats = sum(s.max_num_running_seqs for s in self.running)
            seats_ok = num_seats + sum(s.max_num_running_seqs for s in unit) <= (
                self.config.max_num_seqs
            )
            if seats_ok and isinstance(self._plan_admission(unit, chunk, False, True), list):
                return
            self._preempt(self._victim(lower), out, {})

    def _running_order(self, seq: Sequence):
        if self.by_priority:
            return seq.is_prefill, self.keys[seq.seq_id]
        return seq.is_prefill  # stable: admission order within each phase

    def _victim(self, candidates: list[Sequence]) -> Sequence:
        """Whom to preempt: the most recently admitted ("fcfs"), or the largest
        (priority, arrival), the most recently admitted of equals ("priority")."""
        if self.by_priority:
            return max(reversed(candidates), key=lambda s: self.keys[s.seq_id])
        return candidates[-1]

    def _waiting_unit(self, seq: Sequence) -> list[Sequence]:
        """The waiting sequences admitted together with `seq`: its request's beams, or itself."""
        if seq.beam_group is None:
            return [seq]
        return [s for s in self.waiting if s.beam_group == seq.beam_group]

    def _preempt(
        self, seq: Sequence, out: SchedulerOutputs, scheduled: dict[int, ScheduledSequence]
    ) -> int:
        """Preempt `seq` (with every running beam of its request); returns the tokens given
        back by those already scheduled this step."""
        if seq.beam_group is None:
            unit = [seq]
        else:
            unit = [s for s in self.running if s.beam_group == seq.beam_group]
        refund = 0
        for s in unit:
            if (done := scheduled.pop(s.seq_id, None)) is not None:
                out.scheduled.remove(done)
                refund += done.num_new_tokens
                held = set(s.block_table)  # its copy-on-write copies: their blocks go back
                out.blocks_to_copy = [(a, b) for a, b in out.blocks_to_copy if b not in held]
            self.running.remove(s)
            self.block_manager.free(s)
            s.preempt()
            out.preempted.append(s)
        for s in reversed(unit):
            self._enqueue(s, front=True)
        return refund

    def _enqueue(self, seq: Sequence, front: bool) -> None:
        if not self.by_priority:
            self.waiting.appendleft(seq) if front else self.waiting.append(seq)
            return
        key, i = self.keys[seq.seq_id], len(self.waiting)
        while i > 0 and self.keys[self.waiting[i - 1].seq_id] > key:
            i -= 1
        self.waiting.insert(i, seq)
