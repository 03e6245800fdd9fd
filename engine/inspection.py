"""Read-only views of requests for the snapshot and the sequence inspector."""

import dataclasses

from engine.sequence import SequenceGroup
from engine.telemetry import RequestDetail, RequestState, SequenceDetail


def request_state(group: SequenceGroup) -> RequestState:
    seq = group.seqs[0]
    finished = group.is_finished
    return RequestState(
        request_id=group.request_id,
        status=group.status.value,
        stop_reason=seq.stop_reason.value if seq.stop_reason else None,
        priority=group.priority,
        num_prompt_tokens=len(group.prompt_token_ids),
        num_output_tokens=seq.num_output_tokens,
        num_computed_tokens=seq.num_computed_tokens,
        num_cached_tokens=group.num_cached_tokens,
        num_preemptions=sum(s.num_preemptions for s in group.seqs),
        n=group.params.n,
        text=seq.detokenizer.text if finished else seq.detokenizer.sent_text,
        arrival=group.arrival_time,
        first_scheduled=group.first_scheduled_time,
        first_token=group.first_token_time,
        finished=group.finished_time,
        block_table=tuple(seq.block_table),
    )


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
            )
        )
    return RequestDetail(
        request_id=group.request_id,
        prompt=group.prompt,
        sampling=dataclasses.asdict(group.params),
        seqs=tuple(seqs),
        arrival=group.arrival_time,
        first_token=group.first_token_time,
        finished=group.finished_time,
    )
