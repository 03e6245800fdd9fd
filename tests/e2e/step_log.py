"""The step log as the board publishes it, read back into steps and events.

Each line is one of playground/board/cards.narrate_steps' sentences, e.g. 'step 42 (35 ms):
5 decoding, admitted req-7 · Ada (183 tokens, 0 cached), req-7 · Ada prefill chunk 1 (64/183
tokens), req-3 · Bo finished: stop'. A request is named 'req-N · <its user>' (the lessons'
users have one-word names); a part of the line starts at each request's name."""

import re
from dataclasses import dataclass

LINE = re.compile(r"step (\d+) \(\d+ ms\): (.*)")
PART = re.compile(r", (?=(?:admitted )?req-\d+ · )")  # where the next request's part begins
DECODING = re.compile(r"(\d+) decoding(?:, |$)")
ADMITTED = re.compile(r"admitted (req-\d+) · (\S+) \((\d+) tokens, (\d+) cached\)")
OTHER = re.compile(r"(req-\d+) · (\S+) (.*)")
PREFILL = re.compile(r"prefill (chunk \d+|done) \((\d+)/(\d+) tokens")
KINDS = (("prefill done", "prefill_done"), ("prefill chunk", "prefill_chunk"),
         ("preempted", "preempted"), ("finished: ", "finished"), ("aborted", "aborted"),
         ("forked ", "beams"), ("pruned ", "beams"))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Event:
    kind: str  # an engine StepEvent's kind: admitted, prefill_chunk, prefill_done, ...
    request: str
    user: str
    detail: str  # as the line says it: "183 tokens, 0 cached", "64/183 tokens", "stop"


@dataclass(frozen=True, slots=True)
class Step:
    step: int
    num_decoding: int  # decode tokens of the step
    events: tuple[Event, ...]

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]


def read_line(line: str) -> Step:
    found = LINE.fullmatch(line)
    assert found, f"not a step log line: {line!r}"
    body = found[2]
    decoding = DECODING.match(body)
    if decoding:
        body = body[decoding.end() :]
    parts = [p for p in PART.split(body) if p and p != "nothing to do"]
    events = tuple(_event(part) for part in parts)
    return Step(int(found[1]), int(decoding[1]) if decoding else 0, events)


def _event(part: str) -> Event:
    if m := ADMITTED.fullmatch(part):
        return Event("admitted", m[1], m[2], f"{m[3]} tokens, {m[4]} cached")
    m = OTHER.fullmatch(part)
    assert m, f"not a step event: {part!r}"
    kind = next((k for words, k in KINDS if m[3].startswith(words)), None)
    assert kind, f"an event of no known kind: {part!r}"
    return Event(kind, m[1], m[2], m[3].removeprefix("finished: "))


def admitted_tokens(event: Event) -> tuple[int, int]:
    """(prompt tokens, cached tokens) of an admission."""
    prompt, cached = re.fullmatch(r"(\d+) tokens, (\d+) cached", event.detail).groups()
    return int(prompt), int(cached)


def prefilled(event: Event) -> tuple[int, int]:
    """(prompt tokens computed so far, prompt tokens) after a prefill chunk."""
    m = PREFILL.match(event.detail)
    assert m, event
    return int(m[2]), int(m[3])


def read_log(lines: dict[int, str], upto: int) -> list[Step]:
    """Steps 1 to `upto`, each from its line; fails naming the steps no line was seen of."""
    missing = [s for s in range(1, upto + 1) if s not in lines]
    assert not missing, f"the step log never showed steps {missing[:10]} (of {len(missing)})"
    return [read_line(lines[s]) for s in range(1, upto + 1)]
