"""Read-only views of the engine's requests: outputs, snapshot states, inspector details."""

import time
from collections import Counter
from dataclasses import asdict, dataclass

from engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from engine.sequence import SequenceGroup
from engine.telemetry import EngineSnapshot, RequestState, StepRecord
from engine.waiting import WaitingReason


@dataclass(frozen=True, slots=True)
class SequenceDetail:
    """One completion the way the engine holds it (for the sequence inspector)."""

    index: int
    status: str
    stop_reason: str | None
    prompt_token_ids: tuple[int, ...]
    output_token_ids: tuple[int, ...]
    prompt_tokens: tuple[str, ...]  # each id decoded alone
    output_tokens: tuple[str, ...]
    status_history: tuple[tuple[str, int], ...]  # (status, step at which it happened)
    block_table: tuple[int, ...]
    num_computed_tokens: int
    num_cached_tokens: int
    num_preemptions: int
    text: str
    logprobs: tuple[tuple[tuple[str, float], ...], ...] | None  # per token: (piece, logprob)...
    # (WaitingReason value, first step, last step): why the scheduler left it waiting
    waiting_history: tuple[tuple[str, int, int], ...] = ()
    # (step, tokens dropped, tokens recomputed, seconds lost or None while not back yet)
    preemptions: tuple[tuple[int, int, int, float | None], ...] = ()
    # structured outputs: per output token, how many tokens its grammar allowed ((): none)
    num_allowed_tokens: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class BeamNode:
    """A node of a beam search's tree: a beam, or a hypothesis a beam finished."""

    beam: int  # the beam's id; of a hypothesis, the beam that ended in it
    parent: int | None  # the beam it hangs from: a fork's parent, a hypothesis's beam (beam 0:
    # None)
    status: str  # "live" | "stopped" (ended early: cancelled, ...) | "pruned" | "finished"
    # (a hypothesis among the k best) | "outranked" (a hypothesis pushed out of them)
    step: int  # the step it began at: a fork's, a hypothesis's, beam 0's first token's
    end_step: int | None  # the step a pruned beam or a hypothesis ended at; None: not yet
    branch_at: int  # the output tokens it took from its parent (beam 0: none)
    num_output_tokens: int
    cumulative_logprob: float
    score: float | None = None  # a hypothesis's: cumulative logprob / length ** penalty


@dataclass(frozen=True, slots=True)
class RequestDetail:
    request_id: str
    prompt: str | None
    sampling: dict  # the SamplingParams fields
    seqs: tuple[SequenceDetail, ...]
    arrival: float
    first_token: float | None
    finished: float | None
    beam_tree: tuple[BeamNode, ...] = ()  # a beam search's beams, then its hypotheses


def request_output(group: SequenceGroup) -> RequestOutput:
    """The request's RequestOutput now; hands out each completion's pending delta."""
    if group.beams is not None:
        completions = beam_completions(group)
    else:
        completions = []
        for seq in group.seqs:
            delta = seq.detokenizer.take_delta(seq.is_finished)
            completions.append(
                CompletionOutput(
                    index=seq.index,
                    text=seq.detokenizer.sent_text,
                    token_ids=list(seq.output_token_ids),
                    delta=delta,
                    stop_reason=seq.stop_reason,
                    logprobs=None if seq.logprobs is None else list(seq.logprobs),
                    cumulative_logprob=None if seq.logprobs is None else seq.cumulative_logprob,
                )
            )
    return RequestOutput(
        request_id=group.request_id,
        prompt=group.prompt,
        prompt_token_ids=group.prompt_token_ids,
        outputs=completions,
        finished=group.is_finished,
        metrics=RequestMetrics(
            arrival=group.arrival_time,
            first_scheduled=group.first_scheduled_time,
            first_token=group.first_token_time,
            finished=group.finished_time,
            num_prompt_tokens=len(group.prompt_token_ids),
            num_cached_tokens=group.num_cached_tokens,
            num_generated_tokens=num_generated_tokens(group),
            num_preemptions=num_preemptions(group),
            num_recomputed_tokens=sum(s.preemptions.num_recomputed_tokens for s in group.seqs),
            preemption_time_lost=_time_lost(group, time.monotonic()),
        ),
    )


def _time_lost(group: SequenceGroup, now: float) -> float:
    return sum(s.preemptions.time_lost(now) for s in group.seqs if s.preemptions.events)


def beam_completions(group: SequenceGroup) -> list[CompletionOutput]:
    """The n best finished hypotheses once the search is done; until then the n best live
    beams (their text may still change: a beam's text is sent whole, as the delta of the
    request's last output)."""
    n, finished = group.params.n, group.is_finished
    if group.beams.done:
        picks = [
            (list(h.token_ids), h.text, h.stop_reason, h.cumulative_logprob)
            for h in group.beams.best(n)
        ]
    else:  # running, or ended early (cancelled, timed out, failed): the live beams
        picks = [
            (list(s.output_token_ids), s.detokenizer.text, s.stop_reason, s.cumulative_logprob)
            for s in group.seqs[:n]
        ]
    return [
        CompletionOutput(i, text, token_ids, text if finished else "", reason, None, cumulative)
        for i, (token_ids, text, reason, cumulative) in enumerate(picks)
    ]


def group_stop_reasons(group: SequenceGroup) -> list[str]:
    """The stop reason of each of a finished request's completions."""
    if group.beams is not None and group.beams.done:
        return [h.stop_reason.value for h in group.beams.best(group.params.n)]
    return [s.stop_reason.value for s in group.seqs[: group.params.n]]


def num_generated_tokens(group: SequenceGroup) -> int:
    if group.beams is not None:
        return group.beams.num_generated
    return sum(s.num_output_tokens for s in group.seqs)


def num_preemptions(group: SequenceGroup) -> int:
    if group.beams is not None:
        return group.beams.num_preemptions
    return sum(s.num_preemptions for s in group.seqs)


def build_snapshot(engine) -> EngineSnapshot:
    live = list(engine.groups.values())
    now = time.monotonic()
    blocks = engine.block_manager.blocks
    states = [request_state(g, now, blocks) for g in live] + list(engine.finished_states)
    num_running = sum(s.status == "running" for s in states[: len(live)])
    c, bm, tel = engine.config, engine.block_manager, engine.telemetry
    return EngineSnapshot(
        step=engine.clock.step,
        num_waiting=len(live) - num_running,
        num_running=num_running,
        num_finished=tel.num_requests_finished,
        kv_blocks_total=bm.num_blocks,
        kv_blocks_used=bm.num_used_blocks,
        kv_blocks_cached=bm.num_cached_blocks,
        block_size=bm.block_size,
        kv_backend=c.kv_backend,
        batching=c.batching,
        scheduling_policy=c.scheduling_policy,
        max_num_seqs=c.max_num_seqs,
        max_num_batched_tokens=c.max_num_batched_tokens,
        requests=tuple(states),
        steps=tuple(tel.steps),
        totals=tel.totals(
            bm.num_prefix_queries, bm.num_prefix_hits, sum(_time_lost(g, now) for g in live)
        ),
        ttfts=tuple(tel.ttfts),
        tpots=tuple(tel.tpots),
        kv_cached_block_ids=tuple(bm.evictable),
        max_model_len=c.max_model_len,
    )


def request_state(group: SequenceGroup, now: float | None = None, blocks=None) -> RequestState:
    """`blocks`: the BlockManager's blocks, to name the request's copy-on-write copies."""
    finished = group.is_finished
    seq = group.seqs[0] if group.seqs else None  # None: a beam search that is done
    now = time.monotonic() if now is None else now
    waiting = next((s.waiting_reason for s in group.seqs if s.waiting_reason is not None), None)
    spans = tuple(span for s in group.seqs for span in s.preemptions.spans(now))
    if group.beams is not None:
        first = beam_completions(group)[0]
        stop_reason, text, num_output = first.stop_reason, first.text, len(first.token_ids)
    else:
        stop_reason, num_output = seq.stop_reason, seq.num_output_tokens
        text = seq.detokenizer.text if finished else seq.detokenizer.sent_text
    beams = ()
    if group.beams is not None and not finished:
        beams = tuple((s.index, s.detokenizer.text, s.cumulative_logprob) for s in group.seqs)
    tables = ()
    if len(group.seqs) > 1 and not finished:
        tables = tuple(tuple(s.block_table) for s in group.seqs)
    copies = ()
    forks = group.params.n > 1 or group.params.beam_width > 1  # only a fork is ever copied
    if blocks is not None and forks:
        held = sorted({b for s in group.seqs for b in s.block_table})
        copies = tuple((b, *blocks[b].copy_of) for b in held if blocks[b].copy_of is not None)
    return RequestState(
        request_id=group.request_id,
        status=group.status.value,
        stop_reason=stop_reason.value if stop_reason else None,
        priority=group.priority,
        num_prompt_tokens=len(group.prompt_token_ids),
        num_output_tokens=num_output,
        num_computed_tokens=seq.num_computed_tokens if seq else len(group.prompt_token_ids),
        num_cached_tokens=group.num_cached_tokens,
        num_preemptions=num_preemptions(group),
        n=group.params.n,
        text=text,
        arrival=group.arrival_time,
        first_scheduled=group.first_scheduled_time,
        first_token=group.first_token_time,
        finished=group.finished_time,
        block_table=tuple(seq.block_table) if seq else (),
        max_tokens=group.params.max_tokens,
        waiting_reason=waiting.value if waiting is not None else None,
        num_recomputed_tokens=sum(s.preemptions.num_recomputed_tokens for s in group.seqs),
        preemption_time_lost=sum(b - a for a, b in spans),
        preempted_spans=spans,
        beam_width=group.params.beam_width,
        beams=beams,
        seq_block_tables=tables,
        copied_blocks=copies,
    )


def beam_tree(group: SequenceGroup) -> tuple[BeamNode, ...]:
    """The beam search's tree so far: every beam (forked, then pruned or still live), then
    every hypothesis it finished; empty before its first token."""
    search = group.beams
    if search is None or search.first_step is None:
        return ()
    live = {s.index: s for s in group.seqs}
    nodes = []
    for beam in (0, *search.forks):
        fork = search.forks.get(beam)
        parent, step, branch_at = (None, search.first_step, 0) if fork is None else (
            fork.parent, fork.step, fork.num_output_tokens)  # fmt: skip
        if (p := search.pruned.get(beam)) is not None:
            node = BeamNode(beam, parent, "pruned", step, p.step, branch_at,
                            p.num_output_tokens, p.cumulative_logprob)  # fmt: skip
        else:
            seq = live[beam]
            status = "stopped" if seq.is_finished else "live"
            node = BeamNode(beam, parent, status, step, None, branch_at, seq.num_output_tokens,
                            seq.cumulative_logprob)  # fmt: skip
        nodes.append(node)
    kept = {id(h) for h in search.finished}
    for h in search.hypotheses:
        status = "finished" if id(h) in kept else "outranked"
        n = len(h.token_ids)
        nodes.append(BeamNode(h.beam, h.beam, status, h.step, h.step, n - 1, n,
                              h.cumulative_logprob, h.score))  # fmt: skip
    return tuple(nodes)


def request_detail(group: SequenceGroup, tokenizer) -> RequestDetail:
    pieces = tokenizer.convert_ids_to_tokens
    seqs = []
    for seq in group.seqs:
        logprobs = None
        if seq.logprobs is not None:
            logprobs = tuple(
                tuple((lp.decoded_token, lp.logprob) for lp in alternatives.values())
                for alternatives in seq.logprobs
            )
        seqs.append(
            SequenceDetail(
                index=seq.index,
                status=seq.status.value,
                stop_reason=seq.stop_reason.value if seq.stop_reason else None,
                prompt_token_ids=tuple(seq.prompt_token_ids),
                output_token_ids=tuple(seq.output_token_ids),
                prompt_tokens=tuple(pieces(seq.prompt_token_ids)),
                output_tokens=tuple(pieces(seq.output_token_ids)),
                status_history=tuple((st.value, step) for st, step in seq.status_history),
                block_table=tuple(seq.block_table),
                num_computed_tokens=seq.num_computed_tokens,
                num_cached_tokens=seq.num_cached_tokens,
                num_preemptions=seq.num_preemptions,
                text=seq.detokenizer.text,
                logprobs=logprobs,
                waiting_history=tuple((r.value, a, b) for r, a, b in seq.waiting_history),
                preemptions=tuple(
                    (p.step, p.num_dropped_tokens, p.num_recomputed_tokens, p.time_lost)
                    for p in seq.preemptions.events
                ),
                num_allowed_tokens=() if seq.grammar is None else tuple(seq.grammar.num_allowed),
            )
        )
    return RequestDetail(
        request_id=group.request_id,
        prompt=group.prompt,
        sampling=asdict(group.params),
        seqs=tuple(seqs),
        arrival=group.arrival_time,
        first_token=group.first_token_time,
        finished=group.finished_time,
        beam_tree=beam_tree(group),
    )


def step_record(
    engine, sched, events: tuple, start: float, forward_duration: float, num_generated: int
) -> StepRecord:
    """The engine's StepRecord of the step that began at `start`, scheduled `sched` and
    sampled `num_generated` tokens."""
    bm, scheduler = engine.block_manager, engine.scheduler
    return StepRecord(
        step=engine.clock.step,
        start=start,
        duration=time.monotonic() - start,
        forward_duration=forward_duration,
        num_prefill_tokens=sched.num_prefill_tokens,
        num_decode_tokens=sched.num_decode_tokens,
        num_seqs=len(sched.scheduled),
        token_budget=engine.config.max_num_batched_tokens,
        num_waiting=len(scheduler.waiting),
        num_running=len(scheduler.running),
        kv_blocks_used=bm.num_used_blocks,
        kv_blocks_cached=bm.num_cached_blocks,
        kv_blocks_free=len(bm.free_block_ids),
        events=events,
        waiting_by_reason=_count_waiting(engine, sched),
        num_generated_tokens=num_generated,
    )


def _count_waiting(engine, sched) -> tuple[tuple[str, int], ...]:
    """Waiting requests per WaitingReason (a request counts once, by its first sequence
    still waiting), in the enum's order."""
    first: dict[str, str] = {}
    for seq in engine.scheduler.waiting:
        reason = sched.waiting_reasons.get(seq.seq_id)
        group = engine._group_of.get(seq.seq_id)
        if reason is not None and group is not None:
            first.setdefault(group.request_id, reason.value)
    counts = Counter(first.values())
    return tuple((r.value, counts[r.value]) for r in WaitingReason if counts[r.value])
