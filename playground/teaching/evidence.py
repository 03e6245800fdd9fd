"""The evidence that settles each lesson's question, and the point at which it is complete.

An evidence function is a pure function of a BoardState. Until its end point it returns
Measuring (what it still waits for); from then on a Verdict: the right answer's key, the step
the evidence was complete at, and the numbers it found. A verdict's words are its template
filled with its numbers, so the two cannot disagree. Most verdicts read only the step log up
to the end point (steps that never change), so every later look finds the same verdict; the
lessons latch the first one anyway (lessons.py), for the few that read the engine's requests.

The snapshots' times are engine-busy seconds (playground/driver/busy.py).
"""

import re
from dataclasses import dataclass

from playground.board.state import BoardState


@dataclass(frozen=True, slots=True)
class Measuring:
    progress: str  # e.g. "1 of 2 long prompts prefilled next to decoding chats"


@dataclass(frozen=True, slots=True)
class Verdict:
    answer: str  # the key of the right answer
    step: int  # the step the evidence was complete at
    template: str  # str.format() of `numbers`
    numbers: tuple[tuple[str, object], ...]

    @property
    def words(self) -> str:
        return self.template.format(**dict(self.numbers))


def verdict(answer: str, step: int, template: str, /, **numbers) -> Verdict:
    return Verdict(answer, step, template, tuple(numbers.items()))


# The verdicts' words: str.format() of their numbers (tests/e2e reads the numbers back).
ALL_ADMITTED = (
    "all {users} users were in the running batch after {steps} step(s) (steps {first} to "
    "{last}); the first step carried {tokens} prompt tokens of its budget of {budget}."
)
CHUNKS_BESIDE_DECODES = (
    "{request}'s prompt went in {chunks} chunks (steps {first} to {last}); in {together} of "
    "the {beside} steps where chats were decoding beside it, they decoded in the same step "
    "(up to {most} tokens)."
)
PREEMPTED = (
    "step {step}: {running} requests ran and {free} of {total} KV blocks were free when "
    "{request} was preempted: its blocks were freed and it went back to the waiting queue, to "
    "compute its tokens again once readmitted."
)
REFUSED = "{refused} request(s) were refused, none preempted."
ALL_FINISHED = "all {users} first answers finished without a preemption."
CACHE_SHARE = (
    "the first {requests} requests brought {prompt} prompt tokens; {cached} of them "
    "({share:.0%}) came from the prefix cache."
)
VIP_SEATS = (
    "the {vips} VIPs arrived by step {arrived} and were running at most {wait} step(s) later "
    "(step {step}); {preempted} running regular(s) were preempted for them, while {queued} "
    "regular(s) who came earlier still waited."
)
BEAM_BLOCKS = (
    "{request}'s {beams} beams hold {logical} KV blocks between them in {physical} physical "
    "blocks: {shared} shared by all {beams}, {copies} copied on write."
)
SPEEDUP = (
    "continuous finished in {cont:.2f} s of engine time (step {cont_step}), static in "
    "{static:.2f} s (step {static_step}): {ratio:.2f}x."
)


def _user_ids(state: BoardState) -> list[str]:
    """The simulated users' requests of the ledger, oldest first."""
    return [r.request_id for r in state.records if (r.owner or "").startswith("user:")]


def _first_of_each_user(state: BoardState) -> set[str]:
    first = {}
    for r in state.records:
        if (r.owner or "").startswith("user:"):
            first.setdefault(r.owner, r.request_id)
    return set(first.values())


def _from_the_start(state: BoardState) -> bool:
    """The step log still holds the run's first step (a fresh engine's step 1)."""
    steps = state.snapshot.steps
    return not steps or steps[0].step <= 1


def admit_everyone(state: BoardState) -> Measuring | Verdict:
    """chat_burst: steps from the first until every user's first request was admitted."""
    wanted, steps, n = _first_of_each_user(state), state.snapshot.steps, len(state.users)
    if not steps or not wanted:
        return Measuring("waiting for the first step")
    if not _from_the_start(state):
        return Measuring("the run's first steps have left the step log")
    admitted = set()
    for rec in steps:
        admitted |= {e.request_id for e in rec.events if e.kind == "admitted"} & wanted
        if len(admitted) == len(wanted) == n:
            count = rec.step - steps[0].step + 1
            key = "few" if count <= 2 else "one_each" if count <= n + 2 else "serial"
            return verdict(
                key, rec.step, ALL_ADMITTED,
                users=n, steps=count, first=steps[0].step, last=rec.step,
                tokens=steps[0].num_prefill_tokens, budget=steps[0].token_budget,
            )  # fmt: skip
    return Measuring(f"{len(admitted)} of {n} users admitted")


def decodes_beside_chunks(state: BoardState) -> Measuring | Verdict:
    """long_vs_short: the first long prompt prefilled in chunks while short chats were
    decoding: did they decode in the steps that carried its chunks?"""
    decoding: set[str] = set()  # prefilled and not finished: decoding
    chunk_steps: dict[str, list[tuple[int, int, int]]] = {}  # (step, peers, decodes)
    for rec in state.snapshot.steps:
        for e in rec.events:
            if e.kind in ("prefill_chunk", "prefill_done") and _longer_than(e, rec.token_budget):
                peers = len(decoding - {e.request_id})
                chunk_steps.setdefault(e.request_id, []).append(
                    (rec.step, peers, rec.num_decode_tokens)
                )
        for e in rec.events:
            if e.kind == "prefill_done":
                decoding.add(e.request_id)
                seen = chunk_steps.get(e.request_id, ())
                beside = [s for s in seen if s[1]]
                if beside:
                    return _chunks_verdict(e.request_id, seen, beside, rec.step)
            elif e.kind in ("finished", "aborted", "preempted"):
                decoding.discard(e.request_id)
    open_ = [rid for rid in chunk_steps if rid not in decoding]
    return Measuring(
        f"{len(open_)} long prompt(s) in chunked prefill, {len(decoding)} chat(s) decoding; "
        "waiting for a long prompt prefilled while chats decode"
    )


CHUNK = re.compile(r"\d+/(\d+) tokens")


def _longer_than(event, budget: int) -> bool:
    """A prefill event of a prompt longer than the step's whole token budget."""
    m = CHUNK.match(event.detail)
    return m is not None and int(m[1]) > budget


def _chunks_verdict(rid: str, seen, beside, step: int) -> Verdict:
    together = sum(1 for s in beside if s[2])
    return verdict(
        "together" if 2 * together >= len(beside) else "stall", step, CHUNKS_BESIDE_DECODES,
        request=rid, chunks=len(seen), first=seen[0][0], last=seen[-1][0], together=together,
        beside=len(beside), most=max(s[2] for s in beside),
    )  # fmt: skip


def pool_too_small(state: BoardState) -> Measuring | Verdict:
    """kv_pressure: preempted, refused, or just slow? Settled by the first preemption (or
    refusal), or by every first answer finishing without one."""
    snap, users = state.snapshot, set(_user_ids(state))
    for rec in snap.steps:
        victim = next((e.request_id for e in rec.events if e.kind == "preempted"), None)
        if victim is not None:
            return verdict(
                "preempt", rec.step, PREEMPTED,
                step=rec.step, running=rec.num_running, free=rec.kv_blocks_free,
                total=snap.kv_blocks_total, request=victim,
            )  # fmt: skip
    refused = [r for r in state.records if r.request_id in users and r.error and not r.stop_reason]
    if refused:
        return verdict("refuse", snap.step, REFUSED, refused=len(refused))
    done = [r for r in state.records if r.request_id in _first_of_each_user(state) and r.finished]
    if state.users and len(done) >= len(state.users) and _from_the_start(state):
        return verdict("slow", snap.step, ALL_FINISHED, users=len(done))
    return Measuring(f"the pool is filling: {snap.kv_blocks_used} of {snap.kv_blocks_total} "
                     "KV blocks held, no preemption yet")  # fmt: skip


ADMITTED = re.compile(r"(\d+) tokens, (\d+) cached")


def cache_share(state: BoardState) -> Measuring | Verdict:
    """prefix_cache: of the first requests' prompt tokens (one per user), the share the
    prefix cache served when each was admitted."""
    users, n = set(_user_ids(state)), max(1, len(state.users))
    seen: dict[str, tuple[int, int]] = {}
    if not _from_the_start(state):
        return Measuring("the run's first steps have left the step log")
    for rec in state.snapshot.steps:
        for e in rec.events:
            new = e.kind == "admitted" and e.request_id in users and e.request_id not in seen
            if new and (m := ADMITTED.match(e.detail)):
                seen[e.request_id] = (int(m[1]), int(m[2]))
            if len(seen) == n:
                prompt = sum(p for p, _ in seen.values())
                cached = sum(c for _, c in seen.values())
                share = cached / prompt if prompt else 0.0
                key = "none" if share < 0.1 else "some" if share <= 0.5 else "most"
                return verdict(
                    key, rec.step, CACHE_SHARE,
                    requests=n, prompt=prompt, cached=cached, share=share,
                )  # fmt: skip
    return Measuring(f"{len(seen)} of {n} requests admitted")


def vip_seats(state: BoardState, num_vips: int) -> Measuring | Verdict:
    """vip_users: steps from each VIP's arrival to its admission, with the preemptions in
    between and the earlier regulars still waiting then."""
    snap = state.snapshot
    users = set(_user_ids(state))
    reqs = [r for r in snap.requests if r.request_id in users]
    vips = sorted((r for r in reqs if r.priority == 0), key=lambda r: r.arrival)[:num_vips]
    admitted = {}
    for rec in snap.steps:
        for e in rec.events:
            if e.kind == "admitted" and e.request_id not in admitted:
                admitted[e.request_id] = rec
    if len(vips) < num_vips or any(v.request_id not in admitted for v in vips):
        done = sum(v.request_id in admitted for v in vips)
        return Measuring(f"{done} of {num_vips} VIPs admitted")
    arrived = min(v.arrival for v in vips)
    first = next((s for s in snap.steps if s.start >= arrived), snap.steps[-1])
    last = max((admitted[v.request_id] for v in vips), key=lambda s: s.step)
    waits = [admitted[v.request_id].step - first.step for v in vips]
    preempted = sum(
        e.kind == "preempted" for s in snap.steps if first.step <= s.step <= last.step
        for e in s.events
    )  # fmt: skip
    end = last.start + last.duration
    queued = sum(
        1 for r in reqs
        if r.priority > 0 and r.arrival < arrived
        and (r.first_scheduled is None or r.first_scheduled > end)
    )  # fmt: skip
    key = "preempt" if preempted and max(waits) <= 2 else "queue"
    return verdict(
        key, last.step, VIP_SEATS,
        vips=num_vips, arrived=first.step, wait=max(waits), step=last.step,
        preempted=preempted, queued=queued,
    )  # fmt: skip


def beam_blocks(state: BoardState) -> Measuring | Verdict:
    """beam_search: a beam search with all its beams live: logical blocks against the
    physical blocks they take."""
    for r in state.snapshot.requests:
        tables = r.seq_block_tables
        if r.beam_width > 1 and len(tables) == r.beam_width and r.num_output_tokens:
            logical = sum(len(t) for t in tables)
            physical = len(set().union(*tables))
            shared = len(set(tables[0]).intersection(*tables[1:]))
            return verdict(
                "shared" if physical < logical else "copies", state.snapshot.step, BEAM_BLOCKS,
                request=r.request_id, beams=r.beam_width, logical=logical, physical=physical,
                shared=shared, copies=len(r.copied_blocks),
            )  # fmt: skip
    return Measuring("waiting for a beam search with all its beams")


def speedup(state: BoardState) -> Measuring | Verdict:
    """static_vs_continuous: engine-busy seconds each lane took for the whole workload."""
    if not state.compare:
        return Measuring("not in compare mode")
    stats = [state.stats[lane] for lane in state.lanes[:2]]
    if not all(s.num_submitted and s.num_finished == s.num_submitted for s in stats):
        progress = ", ".join(f"{s.name} {s.num_finished}/{s.num_submitted}" for s in stats)
        return Measuring(f"both lanes finish every request: {progress}")
    cont, static = stats
    ratio = static.finish_busy_s / cont.finish_busy_s if cont.finish_busy_s else 0.0
    key = "same" if ratio < 1.2 else "bit" if ratio <= 1.5 else "lot"
    return verdict(
        key, max(cont.finish_step, static.finish_step), SPEEDUP,
        cont=cont.finish_busy_s, cont_step=cont.finish_step, static=static.finish_busy_s,
        static_step=static.finish_step, ratio=ratio,
    )  # fmt: skip
