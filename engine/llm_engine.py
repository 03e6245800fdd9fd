"""LLMEngine: requests in, one scheduler iteration and one forward per step(), outputs out."""

import itertools
import logging
import time
from collections import deque

import torch

from engine import cpu
from engine.beam_search import BeamSearch
from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.detokenizer import IncrementalDetokenizer, WholeDecode
from engine.inspection import (
    build_snapshot,
    group_stop_reasons,
    request_detail,
    request_output,
    request_state,
    step_record,
)
from engine.intake import check_fits, check_request, check_room, eos_token_ids
from engine.model_runner import build_runner
from engine.outputs import RequestOutput
from engine.request_input import tokenize_prompt
from engine.sampler import Sampler
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler, SchedulerOutputs
from engine.sequence import Sequence, SequenceGroup, SequenceStatus, StepClock, StopReason
from engine.structured_output import new_grammar_state
from engine.telemetry import EngineSnapshot, RequestState, StepEvent, Telemetry

logger = logging.getLogger(__name__)


MAX_FINISHED_KEPT = 256  # finished requests the snapshot still shows


class LLMEngine:
    def __init__(
        self, model, tokenizer, config: EngineConfig | None = None, seed: int | None = None
    ):
        config = config or EngineConfig()
        self.model, self.tokenizer = model, tokenizer
        self.runner, self.config = build_runner(model, config)  # config: as resolved
        c = self.config
        self.block_manager = BlockManager(c.num_kv_blocks, c.block_size, c.enable_prefix_caching)
        self.scheduler = Scheduler(self.config, self.block_manager)
        self.sampler = Sampler(tokenizer, seed)
        self.eos_token_ids = eos_token_ids(model, tokenizer)
        self.clock = StepClock()
        self.telemetry = Telemetry()
        self.groups: dict[str, SequenceGroup] = {}  # live requests
        self.finished: deque[SequenceGroup] = deque(maxlen=MAX_FINISHED_KEPT)
        self.finished_states: deque[RequestState] = deque(maxlen=MAX_FINISHED_KEPT)  # frozen
        self._group_of: dict[int, SequenceGroup] = {}  # seq_id -> its request
        self._seq_ids = itertools.count()
        self._request_ids = itertools.count()
        self._pending_outputs: list[RequestOutput] = []  # aborted between steps
        self._pending_events: list[StepEvent] = []

    @classmethod
    def from_pretrained(
        cls,
        model: str = "default",
        device: str = "auto",
        dtype=None,
        *,
        seed: int | None = None,
        load_options: dict | None = None,
        **overrides,
    ):
        """Load a model ("default", a local directory or a hub id) and build an engine.

        `overrides` are EngineConfig fields, e.g. max_num_seqs=8, kv_backend="hf_cache";
        `load_options` go to engine.loader.load_model (tokenizer, hub); `seed` seeds sampling.
        The load runs on a short-lived thread, so the caller's thread keeps no OpenMP team
        (engine/cpu/openmp.py): the engine may then be stepped on any one thread at full speed.
        """
        unknown = set(overrides) - EngineConfig.field_names()
        if unknown:
            raise ValueError(f"unknown EngineConfig field(s): {', '.join(sorted(unknown))}")
        config = EngineConfig(**overrides)  # validate before the slow load
        from engine.loader import load_model

        def load():
            loaded, tokenizer = load_model(
                model, device=device, dtype=dtype, **(load_options or {})
            )
            return cls(loaded, tokenizer, config, seed=seed)

        return cpu.off_thread(load)

    # -- requests ---------------------------------------------------------------------------
    def add_request(
        self,
        request_id: str,
        prompt: str | list[int] | list[dict],
        params: SamplingParams | None = None,
        arrival_time: float | None = None,
        priority: int = 0,
    ) -> None:
        """Queue a request; ValueError (naming the field) on bad input, and nothing queued."""
        params = check_request(self.config, request_id, self.groups, params, priority)
        check_room(self.config, len(self.scheduler.waiting))
        prompt_text, token_ids = tokenize_prompt(self.tokenizer, prompt)
        check_fits(self.config, token_ids, params)
        arrival = time.monotonic() if arrival_time is None else arrival_time
        group = SequenceGroup(request_id, prompt_text, token_ids, params, arrival, priority)
        seq = self._new_sequence(group, 0)
        group.seqs.append(seq)
        if params.use_beam_search:
            group.beams = BeamSearch(
                params, self.eos_token_ids, self.config.max_model_len, WholeDecode(self.tokenizer)
            )
            seq.beam_group = seq.seq_id
        self.groups[request_id] = group
        self._group_of[seq.seq_id] = group
        self.scheduler.add(seq, priority, arrival)

    def abort_request(self, request_id: str) -> bool:
        """Finish a live request with CANCELLED (its output comes with the next step())."""
        group = self.groups.get(request_id)
        if group is None:
            return False
        self._finish_group(group, StopReason.CANCELLED)
        self._pending_events.append(StepEvent("aborted", request_id))
        self._pending_outputs.append(self._finalize(group))
        return True

    def has_unfinished_requests(self) -> bool:
        return bool(self.groups) or bool(self._pending_outputs)

    def generate(
        self,
        prompts: list[str | list[int] | list[dict]],
        params: SamplingParams | list[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Run the prompts to completion (other queued requests run along); input order."""
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int | dict)):
            prompts = [prompts]
        params_list = params if isinstance(params, list) else [params] * len(prompts)
        if len(params_list) != len(prompts):
            raise ValueError(f"params has {len(params_list)} entries for {len(prompts)} prompts")
        ids = []
        for prompt, p in zip(prompts, params_list, strict=True):
            ids.append(f"generate-{next(self._request_ids)}")
            self.add_request(ids[-1], prompt, p)
        results: dict[str, RequestOutput] = {}
        while len(results) < len(ids):
            for out in self.step():
                if out.finished and out.request_id in ids:
                    results[out.request_id] = out
        return [results[i] for i in ids]

    # -- the step ---------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """One scheduler iteration and one forward over every scheduled token.

        Returns a RequestOutput for every request that got a token or finished (including
        requests aborted or timed out since the previous step).
        """
        start = time.monotonic()
        self.clock.step += 1
        self.clock.start = start
        outputs, self._pending_outputs = self._pending_outputs, []
        events, self._pending_events = self._pending_events, []
        outputs += self._expire_timeouts(start, events)
        sched = self.scheduler.schedule()
        self._note_scheduling(sched, events)
        forward_duration, num_generated = 0.0, 0
        if not sched.is_empty:
            forward_start = time.monotonic()
            scheduled = sched.scheduled
            try:
                logits, sampled = self.runner.execute(scheduled, sched.blocks_to_copy)
            except Exception:  # find the requests that fail; the others go on
                logger.exception("forward failed at step %d; retrying per request", self.clock.step)
                scheduled, logits, sampled, failed = self._execute_isolated(sched)
                outputs += self._fail(failed, events)
            forward_duration = time.monotonic() - forward_start
            if scheduled:
                try:
                    num_generated, touched = self._process_forward(
                        scheduled, logits, sampled, events
                    )
                    outputs += [self._make_output(g) for g in touched]
                except Exception:
                    logger.exception("sampling failed at step %d", self.clock.step)
                    outputs += self._fail(scheduled, events)
        if not sched.is_empty or events:
            record = step_record(self, sched, tuple(events), start, forward_duration, num_generated)
            self.telemetry.record_step(record)
        return outputs

    def _execute_isolated(self, sched: SchedulerOutputs):
        """After a failed batch forward: run each request alone; returns what succeeded
        (scheduled, logits, sampled) and the ScheduledSequences of the requests that failed."""
        by_group: dict[str, list] = {}
        for s in sched.scheduled:
            by_group.setdefault(self._group_of[s.seq.seq_id].request_id, []).append(s)
        ok, rows, sampled, failed = [], [], [], []
        for group_scheduled in by_group.values():
            try:  # redoing the block copies is harmless: their sources are never written
                logits, group_sampled = self.runner.execute(group_scheduled, sched.blocks_to_copy)
            except Exception:
                failed += group_scheduled
                continue
            ok += group_scheduled
            sampled += group_sampled
            if group_sampled:
                rows.append(logits)
        logits = torch.cat(rows) if rows else None
        return ok, logits, sampled, failed

    def _process_forward(self, scheduled, logits, sampled, events):
        computed_at = time.monotonic()
        for s in scheduled:
            seq = s.seq
            recomputed = seq.preemptions.computed(
                seq.num_computed_tokens, s.num_new_tokens, computed_at
            )
            self.telemetry.num_recomputed_tokens += recomputed
            seq.num_computed_tokens += s.num_new_tokens
            self.block_manager.cache_full_blocks(seq)
            if not s.is_decode:
                group = self._group_of[seq.seq_id]
                done = "prefill_done" if s.samples else "prefill_chunk"
                detail = f"{seq.num_computed_tokens}/{seq.num_tokens} tokens"
                events.append(StepEvent(done, group.request_id, detail))
        rows, seqs = [], []
        beam_rows: dict[str, list[tuple[int, Sequence]]] = {}  # request id -> (row, beam)
        for row, s in enumerate(sampled):
            group = self._group_of[s.seq.seq_id]
            if group.beams is not None:
                beam_rows.setdefault(group.request_id, []).append((row, s.seq))
                continue
            rows.append(row)
            seqs.append(s.seq)
            if group.needs_fork and s.seq.num_output_tokens == 0:
                for index in range(len(group.seqs), group.params.n):
                    rows.append(row)
                    seqs.append(self._fork(group, s.seq, index))
        touched: dict[str, SequenceGroup] = {}
        now = time.monotonic()
        num_generated = len(seqs)
        if seqs:
            whole = rows == list(range(logits.shape[0]))  # else beams' rows or forks' repeats
            picked = logits if whole else logits[torch.tensor(rows, device=logits.device)]
            for seq, (token_id, logprobs) in zip(seqs, self.sampler(picked, seqs), strict=True):
                group = self._group_of[seq.seq_id]
                touched[group.request_id] = group
                if group.first_token_time is None:
                    group.first_token_time = now
                if seq.append_token(token_id, logprobs) is not None:
                    self._release(seq)
        for request_id, pairs in beam_rows.items():
            group = self.groups[request_id]
            if self._beam_step(group, pairs, logits, events):
                touched[request_id] = group
                num_generated += len(pairs)
                if group.first_token_time is None:
                    group.first_token_time = now
        for group in touched.values():
            if group.is_finished:
                for reason in group_stop_reasons(group):
                    events.append(StepEvent("finished", group.request_id, reason))
        return num_generated, list(touched.values())

    def _beam_step(self, group: SequenceGroup, pairs, logits, events) -> bool:
        """Advance a beam search by one token (BeamSearch.advance); False while some beam is
        still being recomputed."""
        row_of = {seq.seq_id: row for row, seq in pairs}
        if any(b.seq_id not in row_of for b in group.seqs):  # ready beams give their token back
            for _, seq in pairs:
                seq.num_computed_tokens -= 1
            return False
        note = group.beams.advance(group, row_of, logits, self._fork, self._drop_beam)
        if note:
            events.append(StepEvent("beams", group.request_id, note))
        return True

    def _drop_beam(self, seq: Sequence) -> None:
        seq.set_status(SequenceStatus.FINISHED)  # no stop reason: not a completion
        self._release(seq)
        del self._group_of[seq.seq_id]

    def _note_scheduling(self, sched: SchedulerOutputs, events: list[StepEvent]) -> None:
        now = time.monotonic()
        for seq in self.scheduler.waiting:
            if (reason := sched.waiting_reasons.get(seq.seq_id)) is not None:
                seq.note_waiting(reason)
        preempted_groups = set()
        for seq in sched.preempted:
            self.runner.free(seq)
            group = self._group_of[seq.seq_id]
            events.append(StepEvent("preempted", group.request_id))
            if group.beams is not None and group.request_id not in preempted_groups:
                group.beams.num_preemptions += 1
            preempted_groups.add(group.request_id)
        for seq in sched.admitted:
            group = self._group_of[seq.seq_id]
            if group.first_scheduled_time is None:
                group.first_scheduled_time = now
                group.num_cached_tokens = seq.num_cached_tokens
            detail = f"{seq.num_tokens} tokens, {seq.num_cached_tokens} cached"
            events.append(StepEvent("admitted", group.request_id, detail))

    def _fail(self, scheduled, events: list[StepEvent]) -> list[RequestOutput]:
        """Finish the requests of these ScheduledSequences with ERROR."""
        outputs = []
        live = [self._group_of[s.seq.seq_id] for s in scheduled if s.seq.seq_id in self._group_of]
        groups = {id(g): g for g in live}
        for group in groups.values():
            self._finish_group(group, StopReason.ERROR)
            events.append(StepEvent("finished", group.request_id, StopReason.ERROR.value))
            outputs.append(self._make_output(group))
        return outputs

    def _expire_timeouts(self, now: float, events: list[StepEvent]) -> list[RequestOutput]:
        expired = [
            g for g in self.groups.values()
            if g.params.timeout_s is not None and now - g.arrival_time >= g.params.timeout_s
        ]  # fmt: skip
        for group in expired:
            self._finish_group(group, StopReason.TIMEOUT)
            events.append(StepEvent("finished", group.request_id, StopReason.TIMEOUT.value))
        return [self._make_output(g) for g in expired]

    # -- sequences ----------------------------------------------------------------------------
    def _new_sequence(self, group: SequenceGroup, index: int) -> Sequence:
        params = group.params
        generator = None
        if params.seed is not None:
            generator = torch.Generator().manual_seed(hash((params.seed, index)) & (2**63 - 1))
        detok = IncrementalDetokenizer(
            self.tokenizer, params.stop, params.include_stop_str_in_output,
            params.skip_special_tokens, params.min_tokens,
        )  # fmt: skip
        grammar = new_grammar_state(self.model, self.tokenizer, params)  # FieldError if bad
        return Sequence(
            next(self._seq_ids), index, group.prompt_token_ids, params, detok,
            self.eos_token_ids, self.config.max_model_len, generator, self.clock, grammar,
        )  # fmt: skip

    def _fork(self, group: SequenceGroup, parent: Sequence, index: int) -> Sequence:
        child = self._new_sequence(group, index)
        forked = parent.fork(child.seq_id, index, child.detokenizer, child.generator, child.grammar)
        self.block_manager.fork(parent, forked)
        self.runner.fork(parent, forked)
        group.seqs.append(forked)
        self._group_of[forked.seq_id] = group
        self.scheduler.add_running(forked, parent)
        return forked

    def _release(self, seq: Sequence) -> None:
        """A sequence just finished: give back its blocks / cache."""
        seq.preemptions.finished(time.monotonic())
        self.scheduler.finish(seq)
        self.runner.free(seq)

    def _finish_group(self, group: SequenceGroup, reason: StopReason) -> None:
        for seq in group.get_unfinished_seqs():
            seq.finish(reason)
            self._release(seq)

    def _make_output(self, group: SequenceGroup) -> RequestOutput:
        if group.is_finished:
            return self._finalize(group)
        return request_output(group)

    def _finalize(self, group: SequenceGroup) -> RequestOutput:
        group.finished_time = time.monotonic()
        output = request_output(group)
        del self.groups[group.request_id]
        for seq in group.seqs:
            del self._group_of[seq.seq_id]
        self.finished.append(group)
        self.finished_states.append(request_state(group))
        self.telemetry.record_finished(output.metrics, group_stop_reasons(group))
        return output

    # -- what it shows ------------------------------------------------------------------------
    def snapshot(self) -> EngineSnapshot:
        """An immutable picture of queues, requests, KV blocks and recent steps."""
        return build_snapshot(self)

    def inspect(self, request_id: str):
        """The request the way the engine holds it (RequestDetail), or None if unknown."""
        group = self.groups.get(request_id) or next(
            (g for g in self.finished if g.request_id == request_id), None
        )
        return None if group is None else request_detail(group, self.tokenizer)
