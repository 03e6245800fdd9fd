"""Each lesson's verdict as a page shows it, against the step log the board published.

The verdict's numbers are read back from its words with their template (the one each preset's
shipped workload ends in, playground/teaching/evidence.py); each lesson's check derives from
the step log (tests/e2e/step_log.py, steps 1 to the verdict's) what those numbers and the
answer claim, and compares them as the words print them. What the log cannot show is named in
each check."""

import math
import re
from dataclasses import dataclass

from playground.teaching import evidence as ev
from playground.teaching.lessons import LESSONS
from playground.workload.scenarios import SCENARIOS
from tests.e2e.step_log import Step, admitted_tokens, prefilled

FIELD = re.compile(r"\{(\w+)(?::([^}]*))?\}")
MEASURED = re.compile(r"measured at step (\d+): (.*)", re.S)
TEMPLATES = {
    "chat_burst": ev.ALL_ADMITTED,
    "long_vs_short": ev.CHUNKS_BESIDE_DECODES,
    "kv_pressure": ev.PREEMPTED,  # 8 answers of 160 tokens never fit 40 blocks of 16
    "prefix_cache": ev.CACHE_SHARE,
    "vip_users": ev.VIP_SEATS,
    "beam_search": ev.BEAM_BLOCKS,
    "static_vs_continuous": ev.SPEEDUP,
}
ENDED = ("finished", "aborted", "preempted")  # a request leaves the running batch


@dataclass(frozen=True)
class Shown:
    """A verdict as the panel shows it: its step, answer, words and their numbers."""

    key: str  # the lesson's
    step: int
    answer: str  # the measured answer's key
    numbers: dict[str, str]  # each number as the words print it

    def expect(self, **values) -> None:
        """Each of `values`, printed as the template prints it, is the number shown."""
        specs = dict(FIELD.findall(TEMPLATES[self.key]))
        for name, value in values.items():
            assert self.numbers[name] == format(value, specs[name]), (self.key, name, value)

    def number(self, name: str) -> int:
        return int(self.numbers[name])


def read_shown(key: str, text: str) -> Shown:
    """The verdict of a panel's text: 'measured at step N: <answer>: <words>'."""
    found = MEASURED.search(text)
    assert found, text
    rest = found[2].strip()
    answer = next((k for k, t in LESSONS[key].answers if rest.startswith(t + ": ")), None)
    assert answer, f"no answer of {key} opens {rest!r}"
    words = rest[len(LESSONS[key].answer_text(answer)) + 2 :]
    return Shown(key, int(found[1]), answer, read_numbers(TEMPLATES[key], words))


def read_numbers(template: str, words: str) -> dict[str, str]:
    """The numbers `template` was filled with to give `words`, as printed."""
    pattern, seen, at = "", set(), 0
    for field in FIELD.finditer(template):
        name = field[1]
        pattern += re.escape(template[at : field.start()])
        pattern += f"(?P={name})" if name in seen else f"(?P<{name}>.+?)"
        seen.add(name)
        at = field.end()
    found = re.fullmatch(pattern + re.escape(template[at:]), words)
    assert found, f"{words!r} is not of the template {template!r}"
    return found.groupdict()


def _knob(key: str, name: str):
    return SCENARIOS[key].engine_overrides[name]


def _prefill_tokens(log: list[Step]) -> list[int]:
    """Prompt tokens each step computed (a request's progress starts at its cached tokens)."""
    done, per_step = {}, []
    for s in log:
        tokens = 0
        for e in s.events:
            if e.kind == "admitted":
                done[e.request] = admitted_tokens(e)[1]
            elif e.kind in ("prefill_chunk", "prefill_done"):
                now = prefilled(e)[0]
                tokens += now - done.get(e.request, 0)
                done[e.request] = now
        per_step.append(tokens)
    return per_step


def chat_burst(shown: Shown, log: list[Step], _scoreboard: str) -> None:
    """The step each user's first request was admitted at; the first step's prompt tokens."""
    num_users, first_in = SCENARIOS["chat_burst"].num_users, {}
    for s in log:
        for e in s.of("admitted"):
            first_in.setdefault(e.user, s.step)
    last = sorted(first_in.values())[num_users - 1]  # the last user's
    budget = _knob("chat_burst", "max_num_batched_tokens")
    shown.expect(users=num_users, steps=last, first=1, last=last,
                 tokens=_prefill_tokens(log)[0], budget=budget)  # fmt: skip
    assert shown.step == last
    assert shown.answer == (
        "few" if last <= 2 else "one_each" if last <= num_users + 2 else "serial"
    )


def long_vs_short(shown: Shown, log: list[Step], _scoreboard: str) -> None:
    """The long prompt's chunk steps, the chats decoding beside each; no prompt cached."""
    budget, rid = _knob("long_vs_short", "max_num_batched_tokens"), shown.numbers["request"]
    decoding, chunks, long_done = set(), [], []  # chunks: (step, chats beside, decode tokens)
    for s in log[: shown.step]:
        for e in s.events:
            if e.request == rid and e.kind in ("prefill_chunk", "prefill_done"):
                chunks.append((s.step, len(decoding - {rid}), s.num_decoding))
        for e in s.events:
            if e.kind == "prefill_done":
                decoding.add(e.request)
                if prefilled(e)[1] > budget:
                    long_done.append(s.step)
            elif e.kind in ENDED:
                decoding.discard(e.request)
    beside = [c for c in chunks if c[1]]
    together = sum(1 for c in beside if c[2])
    shown.expect(chunks=len(chunks), first=chunks[0][0], last=chunks[-1][0], beside=len(beside),
                 together=together, most=max(c[2] for c in beside))  # fmt: skip
    assert len(chunks) >= 2 and long_done[0] == chunks[-1][0] == shown.step  # the first long one
    assert shown.answer == "together"
    cached = [e for s in log for e in s.of("admitted") if admitted_tokens(e)[1]]
    assert not cached, cached  # no prefix-cache hit hides a prompt's chunks


def kv_pressure(shown: Shown, log: list[Step], _scoreboard: str) -> None:
    """The first preemption: its step, its victim, the requests still running after it. The
    free blocks then are not in the log: only their bounds are checked."""
    running = set()
    for s in log:
        for e in s.events:
            if e.kind == "admitted":
                running.add(e.request)
            elif e.kind in ENDED:
                running.discard(e.request)
        if victims := s.of("preempted"):
            break
    else:
        raise AssertionError("the step log holds no preemption")
    total = _knob("kv_pressure", "num_kv_blocks")
    shown.expect(step=s.step, running=len(running), total=total, request=victims[0].request)
    assert shown.step == s.step and 0 <= shown.number("free") <= total
    assert shown.answer == "preempt"


def prefix_cache(shown: Shown, log: list[Step], _scoreboard: str) -> None:
    """The first admission of the first requests, one per user: prompt and cached tokens."""
    num_users, firsts = SCENARIOS["prefix_cache"].num_users, {}
    for s in log:
        for e in s.of("admitted"):
            if e.request not in firsts and len(firsts) < num_users:
                firsts[e.request] = (s.step, *admitted_tokens(e))
    prompt = sum(p for _, p, _ in firsts.values())
    cached = sum(c for _, _, c in firsts.values())
    shown.expect(requests=num_users, prompt=prompt, cached=cached, share=cached / prompt)
    assert shown.step == max(step for step, _, _ in firsts.values())
    assert shown.answer == "most"


def vip_users(shown: Shown, log: list[Step], _scoreboard: str) -> None:
    """The VIPs' admissions and the preemptions from their arrival on. The step they arrived
    by (a time) and the regulars still waiting (never in a line) are not in the log: the
    arrival is checked to come before the admissions."""
    profiles = SCENARIOS["vip_users"].workload().profiles
    vips = {p.name for p in profiles if p.priority == 0}
    admitted = {}
    for s in log[: shown.step]:
        for e in s.of("admitted"):
            if e.user in vips:
                admitted.setdefault(e.user, s.step)
    arrived, last = shown.number("arrived"), max(admitted.values())
    assert len(admitted) == len(vips) and last == shown.step
    assert arrived <= min(admitted.values())
    preempted = sum(len(s.of("preempted")) for s in log if arrived <= s.step <= last)
    wait = last - arrived
    shown.expect(vips=len(vips), wait=wait, step=last, preempted=preempted)
    assert shown.answer == ("preempt" if preempted and wait <= 2 else "queue")


def beam_search(shown: Shown, log: list[Step], _scoreboard: str) -> None:
    """The beam search's blocks at the verdict's step: after its prefill each step adds one
    token to every beam, so each beam holds ceil(tokens / block size) blocks; the prompt's
    full blocks are shared by all; a search forked in this very step shares every block.
    Which later blocks a beam shares or copied is not in the log: only its bounds are."""
    rid, at = shown.numbers["request"], shown.step
    events = [(s.step, e) for s in log[:at] for e in s.events if e.request == rid]
    admissions = [e for _, e in events if e.kind == "admitted"]
    prefilled_at = [step for step, e in events if e.kind == "prefill_done"]
    assert len(admissions) == 1 and prefilled_at, events  # never preempted, prefilled
    width = {p.name: p.beam_width for p in SCENARIOS["beam_search"].workload().profiles}
    beams, block = width[admissions[0].user], _knob("beam_search", "block_size")
    prompt = admitted_tokens(admissions[0])[0]
    blocks = math.ceil((prompt + at - prefilled_at[0]) / block)
    shown.expect(beams=beams, logical=beams * blocks)
    physical, shared, copies = (shown.number(n) for n in ("physical", "shared", "copies"))
    assert prompt // block <= shared <= blocks <= physical < beams * blocks, shown
    if at == prefilled_at[0]:
        assert physical == shared == blocks and copies == 0, shown
    assert shown.answer == "shared"


SCORE_ROW = re.compile(r"(continuous|static)\s+(\d+)/(\d+)\s+([\d.]+) s · step (\d+)")
SCORE_RATIO = re.compile(r"finished the workload in ([\d.]+) s of engine time, \w+ in ([\d.]+) "
                         r"s: ([\d.]+)×")  # fmt: skip


def static_vs_continuous(shown: Shown, log: list[Step], scoreboard: str) -> None:
    """The scoreboard's finish times and steps (engine-busy seconds: not in the log) and its
    ratio; the step log (the continuous lane's) holds every request's finish, the last at
    that lane's finish step; continuous finished first."""
    rows = {lane: rest for lane, *rest in SCORE_ROW.findall(scoreboard)}
    cont, static, ratio = SCORE_RATIO.search(scoreboard).groups()
    num = str(SCENARIOS["static_vs_continuous"].num_users)
    assert [rows[lane][:2] for lane in ("continuous", "static")] == [[num, num]] * 2, scoreboard
    assert [rows["continuous"][2], rows["static"][2]] == [cont, static]
    steps = {lane: int(rows[lane][3]) for lane in rows}
    shown.expect(cont_step=steps["continuous"], static_step=steps["static"])
    assert [shown.numbers[n] for n in ("cont", "static", "ratio")] == [cont, static, ratio]
    assert shown.step == max(steps.values()) and float(cont) < float(static)
    finished = [s.step for s in log for _ in s.of("finished")]
    assert len(finished) == int(num) and max(finished) == steps["continuous"], finished
    bounds = (float(ratio) - 0.005, float(ratio) + 0.005)  # the printed ratio is rounded
    assert shown.answer in {"same" if r < 1.2 else "bit" if r <= 1.5 else "lot" for r in bounds}


CHECKS = {check.__name__: check for check in (chat_burst, long_vs_short, kv_pressure,
          prefix_cache, vip_users, beam_search, static_vs_continuous)}  # fmt: skip
