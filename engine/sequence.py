"""Sequence and SequenceGroup: one request, its n completions, their lifecycle and stop rules."""

import enum
from dataclasses import dataclass

import torch

from engine.detokenizer import IncrementalDetokenizer
from engine.preemption import PreemptionLog
from engine.sampling_params import SamplingParams
from engine.waiting import WaitingReason


class SequenceStatus(enum.StrEnum):
    WAITING = "waiting"  # never ran, or preempted (its KV blocks were freed: recompute)
    RUNNING = "running"  # admitted: holds KV blocks, gets tokens scheduled every step
    FINISHED = "finished"  # stop_reason says why; holds nothing


_TRANSITIONS = {
    SequenceStatus.WAITING: {SequenceStatus.RUNNING, SequenceStatus.FINISHED},
    SequenceStatus.RUNNING: {SequenceStatus.WAITING, SequenceStatus.FINISHED},
    SequenceStatus.FINISHED: set(),
}


class StopReason(enum.StrEnum):
    EOS = "eos"
    MAX_TOKENS = "max_tokens"
    STOP_WORD = "stop_word"  # a stop string or one of stop_token_ids
    CANCELLED = "cancelled"
    LENGTH = "length"  # the context window is full
    TIMEOUT = "timeout"
    ERROR = "error"  # the forward failed for this request; the engine lives on


@dataclass(slots=True)
class StepClock:
    """The engine's step counter, shared with its sequences to date their status changes."""

    step: int = 0
    start: float = 0.0  # time.monotonic() at the start of that step


class Sequence:
    """One completion: prompt and output tokens, KV block table, progress and stop rules."""

    def __init__(
        self,
        seq_id: int,
        index: int,
        prompt_token_ids: list[int],
        params: SamplingParams,
        detokenizer: IncrementalDetokenizer,
        eos_token_ids: frozenset[int],
        max_model_len: int,
        generator: torch.Generator | None = None,
        clock: StepClock | None = None,
        grammar=None,
    ):
        self.seq_id = seq_id
        self.index = index  # position among the request's n completions
        self.prompt_token_ids = prompt_token_ids
        self.output_token_ids: list[int] = []
        self.params = params
        self.detokenizer = detokenizer
        self.eos_token_ids = eos_token_ids
        self.max_model_len = max_model_len
        self.generator = generator  # seeded sampling; None = the engine's shared generator
        # GrammarState (engine/structured_output.py) under structured outputs, else None
        self.grammar = grammar
        self.status = SequenceStatus.WAITING
        self.stop_reason: StopReason | None = None
        self.block_table: list[int] = []  # KV block ids, in token order
        self.num_computed_tokens = 0  # tokens whose K/V sit in the cache
        self.num_cached_tokens = 0  # of those, found in the prefix cache at admission
        self.num_preemptions = 0
        self.preemptions = PreemptionLog()  # what each preemption cost (engine/preemption.py)
        self.waiting_reason: WaitingReason | None = None  # why the last step left it waiting
        self.waiting_history: list[list] = []  # [reason, first step, last step], in order
        # The request's id for its beams (beam search): they are admitted, scheduled and
        # preempted together. None for every other sequence.
        self.beam_group: int | None = None
        self.logprobs: list[dict] | None = [] if params.logprobs is not None else None
        self.cumulative_logprob = 0.0  # of the output tokens (beams; or logprobs asked)
        self.clock = clock or StepClock()
        self.status_history: list[tuple[SequenceStatus, int]] = [(self.status, self.clock.step)]

    # -- derived numbers -------------------------------------------------------------------
    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def last_token_id(self) -> int:
        return self.output_token_ids[-1] if self.output_token_ids else self.prompt_token_ids[-1]

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def max_num_running_seqs(self) -> int:
        """Seats this sequence takes in the batch: n (or beam_width) for a prompt not yet
        sampled (its siblings fork from it with the first token), else 1."""
        return self.params.num_seqs if not self.output_token_ids else 1

    @property
    def is_prefill(self) -> bool:
        """More than the last token still needs its K/V (a prompt, or a recompute)."""
        return self.num_uncomputed_tokens > 1

    @property
    def is_finished(self) -> bool:
        return self.status == SequenceStatus.FINISHED

    @property
    def text(self) -> str:
        return self.detokenizer.text

    # -- lifecycle --------------------------------------------------------------------------
    def set_status(self, status: SequenceStatus) -> None:
        if status not in _TRANSITIONS[self.status]:
            raise RuntimeError(
                f"sequence {self.seq_id}: illegal transition {self.status.value} -> {status.value}"
            )
        self.status = status
        self.status_history.append((status, self.clock.step))
        if status != SequenceStatus.WAITING:
            self.waiting_reason = None

    def note_waiting(self, reason: WaitingReason) -> None:
        """The scheduler left it waiting this step for `reason` (kept as runs of steps)."""
        self.waiting_reason = reason
        step, runs = self.clock.step, self.waiting_history
        if runs and runs[-1][0] == reason and runs[-1][2] == step - 1:
            runs[-1][2] = step
        else:
            runs.append([reason, step, step])

    def finish(self, reason: StopReason) -> None:
        self.set_status(SequenceStatus.FINISHED)
        self.stop_reason = reason

    def preempt(self) -> None:
        """Back to WAITING; the caller frees the blocks, so everything is recomputed."""
        self.set_status(SequenceStatus.WAITING)
        self.preemptions.preempted(self.clock.step, self.num_computed_tokens, self.clock.start)
        self.num_computed_tokens = 0
        self.num_preemptions += 1

    def append_token(self, token_id: int, logprobs: dict | None = None) -> StopReason | None:
        """Add one sampled token and apply every stop rule; the one place a sequence stops."""
        assert self.status == SequenceStatus.RUNNING, self.status
        self.output_token_ids.append(token_id)
        if self.logprobs is not None and logprobs is not None:
            self.logprobs.append(logprobs)
            self.cumulative_logprob += logprobs[token_id].logprob
        params = self.params
        is_eos = not params.ignore_eos and token_id in self.eos_token_ids
        is_stop_token = is_eos or token_id in params.stop_token_ids
        # As vLLM: the token that stops the sequence is not in the text unless asked for.
        shown = self.output_token_ids
        if is_stop_token and not params.include_stop_str_in_output:
            shown = shown[:-1]
        stop_string = self.detokenizer.update(shown)
        if self.grammar is not None:
            self.grammar.advance(self.output_token_ids)
        if is_eos:
            reason = StopReason.EOS
        elif is_stop_token or stop_string is not None:
            reason = StopReason.STOP_WORD
        elif self.grammar is not None and self.grammar.is_rejected:
            reason = StopReason.ERROR  # a token its grammar refused: the output cannot parse
        elif self.grammar is not None and self.grammar.is_terminated:
            reason = StopReason.EOS  # the grammar is complete: it allows only the end
        elif self.num_output_tokens >= params.max_tokens:
            reason = StopReason.MAX_TOKENS
        elif self.num_tokens >= self.max_model_len:
            reason = StopReason.LENGTH
        else:
            return None
        self.finish(reason)
        return reason

    def fork(self, seq_id: int, index: int, detokenizer, generator, grammar=None) -> "Sequence":
        """A sibling that shares everything computed so far (the caller shares the blocks;
        a new `grammar` catches up with the shared output tokens before its next mask)."""
        child = Sequence(
            seq_id, index, self.prompt_token_ids, self.params, detokenizer,
            self.eos_token_ids, self.max_model_len, generator, self.clock, grammar,
        )  # fmt: skip
        child.output_token_ids = list(self.output_token_ids)
        child.cumulative_logprob = self.cumulative_logprob
        if self.logprobs is not None:
            child.logprobs = list(self.logprobs)
        child.num_computed_tokens = self.num_computed_tokens
        child.num_cached_tokens = self.num_cached_tokens
        child.beam_group = self.beam_group
        child.set_status(self.status)
        return child


class SequenceGroup:
    """One request: its id, prompt, params and arrival, and the n sequences decoding it.

    It starts with one sequence; the other n - 1 are forked from it once its prompt is
    computed, so all n share the prompt's KV blocks. Under beam search (`beams`) `seqs` are
    the live beams, best first: they fork and are pruned every step, and the request's
    completions are the best finished hypotheses.
    """

    def __init__(
        self,
        request_id: str,
        prompt: str | None,
        prompt_token_ids: list[int],
        params: SamplingParams,
        arrival_time: float,
        priority: int = 0,
    ):
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.params = params
        self.arrival_time = arrival_time
        self.priority = priority
        self.seqs: list[Sequence] = []
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.finished_time: float | None = None
        self.num_cached_tokens = 0  # prompt tokens served by the prefix cache at first admission
        self.beams = None  # BeamSearch (engine/beam_search.py) when params.use_beam_search

    @property
    def is_finished(self) -> bool:
        return all(s.is_finished for s in self.seqs)  # a finished beam search keeps none

    @property
    def needs_fork(self) -> bool:
        return self.beams is None and len(self.seqs) < self.params.n

    def get_unfinished_seqs(self) -> list[Sequence]:
        return [s for s in self.seqs if not s.is_finished]

    @property
    def status(self) -> SequenceStatus:
        """RUNNING if any sequence runs, else WAITING if any waits, else FINISHED."""
        statuses = {s.status for s in self.seqs}
        for st in (SequenceStatus.RUNNING, SequenceStatus.WAITING):
            if st in statuses:
                return st
        return SequenceStatus.FINISHED
