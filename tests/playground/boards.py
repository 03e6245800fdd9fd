"""Hand-made EngineSnapshot / BoardState values for chart, card and UI tests (no engine)."""

from engine.telemetry import EngineSnapshot, RequestState, StepEvent, StepRecord, Totals
from playground.board.state import BoardState, LaneStats
from playground.handles import RequestRecord
from playground.workload.users import USER_COLOURS, USER_NAMES, UserView


def step(
    n,
    *,
    start=None,
    prefill=0,
    decode=0,
    waiting=0,
    running=0,
    budget=64,
    events=(),
    duration=0.05,
    used=0,
    cached=0,
    free=0,
):
    return StepRecord(
        step=n,
        start=n * 0.1 if start is None else start,
        duration=duration,
        forward_duration=duration * 0.8,
        num_prefill_tokens=prefill,
        num_decode_tokens=decode,
        num_seqs=running,
        token_budget=budget,
        num_waiting=waiting,
        num_running=running,
        kv_blocks_used=used,
        kv_blocks_cached=cached,
        kv_blocks_free=free,
        events=tuple(StepEvent(*e) for e in events),
    )


def request(
    rid,
    *,
    status="running",
    stop=None,
    arrival=0.0,
    scheduled=None,
    first=None,
    finished=None,
    blocks=(),
    text="",
    prompt=8,
    output=0,
    preemptions=0,
):
    return RequestState(
        request_id=rid,
        status=status,
        stop_reason=stop,
        priority=0,
        num_prompt_tokens=prompt,
        num_output_tokens=output,
        num_computed_tokens=prompt + output,
        num_cached_tokens=0,
        num_preemptions=preemptions,
        n=1,
        text=text,
        arrival=arrival,
        first_scheduled=scheduled,
        first_token=first,
        finished=finished,
        block_table=tuple(blocks),
    )


def snapshot(
    *,
    steps=(),
    requests=(),
    totals=None,
    blocks=16,
    used=0,
    cached=0,
    ttfts=(),
    tpots=(),
    batching="continuous",
    cached_ids=(),
):
    steps = tuple(steps)
    return EngineSnapshot(
        step=steps[-1].step if steps else 0,
        num_waiting=sum(r.status == "waiting" for r in requests),
        num_running=sum(r.status == "running" for r in requests),
        num_finished=sum(r.status == "finished" for r in requests),
        kv_blocks_total=blocks,
        kv_blocks_used=used,
        kv_blocks_cached=cached,
        kv_cached_block_ids=tuple(cached_ids),
        block_size=4,
        kv_backend="paged",
        batching=batching,
        scheduling_policy="fcfs",
        max_num_seqs=8,
        max_num_batched_tokens=64,
        requests=tuple(requests),
        steps=steps,
        totals=totals or Totals(),
        ttfts=tuple(ttfts),
        tpots=tuple(tpots),
    )


def busy_board(
    num_users=32, num_steps=500, version=1, *, num_finished=0, num_samples=200, kv_blocks=512
) -> BoardState:
    """A busy board: num_users users mid-answer, num_steps steps of history, num_finished
    finished requests (records and states), num_samples TTFT and TPOT samples each."""
    users, records, reqs = [], [], []
    for i in range(num_finished):  # older than the users' live requests
        rid, text = f"req-done-{i}", "An answer that ended. " * 8
        records.append(RequestRecord(rid, f"api:{i:04d}", "What is KV? " * 10, 0.0, text, 40,
                                     "eos", True))  # fmt: skip
        reqs.append(request(rid, status="finished", stop="eos", arrival=-10.0 + i * 0.01,
                            scheduled=-9.9 + i * 0.01, first=-9.8 + i * 0.01,
                            finished=-5.0 + i * 0.01, text=text, output=40))  # fmt: skip
    for i in range(num_users):
        rid, owner = f"req-{i}", f"user:{USER_NAMES[i % len(USER_NAMES)]}{i}"
        users.append(
            UserView(owner[5:], USER_COLOURS[i % 16], owner, "waiting for answer", rid, 3, 0, None)
        )
        text = "The quick brown fox jumps over the lazy dog. " * 6
        records.append(RequestRecord(rid, owner, "Tell me a story " * 10, 0.0, text, 60))
        reqs.append(
            request(
                rid,
                arrival=i * 0.05,
                scheduled=i * 0.05 + 0.1,
                first=i * 0.05 + 0.3,
                blocks=range(i * 4, i * 4 + 4),
                text=text,
                output=60,
            )
        )
    steps = [
        step(
            n,
            prefill=32 if n % 10 == 0 else 0,
            decode=num_users,
            running=num_users,
            waiting=2,
            used=128,
            events=[("finished", f"req-{n % num_users}", "eos")] if n % 7 == 0 else [],
        )
        for n in range(1, num_steps + 1)
    ]
    totals = Totals(
        num_requests_finished=70,
        num_generated_tokens=9000,
        elapsed_busy=60.0,
        tokens_per_s=150.0,
        ttft_p50=0.3,
        ttft_p95=0.9,
        tpot_p50=0.05,
        tpot_p95=0.09,
        stop_reasons={"eos": 50, "max_tokens": 15, "cancelled": 5},
    )
    snap = snapshot(
        steps=steps,
        requests=reqs,
        totals=totals,
        blocks=kv_blocks,
        used=128,
        ttfts=[0.1 * (i % 9) for i in range(num_samples)],
        tpots=[0.01 * (i % 7) for i in range(num_samples)],
    )
    stats = {"main": LaneStats("main", "continuous", 100, 70, num_steps, 60.0, 59.0, 480)}
    return BoardState(
        version,
        ("main",),
        {"main": snap},
        stats,
        tuple(records),
        tuple(users),
        "chat_burst",
        False,
        None,
        60.0,
    )
