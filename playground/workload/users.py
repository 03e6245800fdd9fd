"""Simulated users and the arrival processes that bring them to the engine.

A `Workload` is a set of `SimulatedUser`s. Each user is closed-loop: it arrives (when the
arrival process says), sends a prompt from its pool, waits for the answer (or cancels it on
purpose after a few tokens), thinks for a while, and sends the next one. The driver thread
calls `tick()` before every step and `on_output()` / `on_rejected()` with what came back, so
a workload never needs a thread or a lock of its own; it publishes `views()` for the UI.
"""

import functools
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine import SamplingParams

PROMPTS_DIR = Path(__file__).resolve().parents[2] / "assets" / "prompts"

# Colour-blind friendly, readable on white and on the dark card header.
USER_COLOURS = (
    "#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#65a30d",
    "#9333ea", "#0d9488", "#ea580c", "#4f46e5", "#be123c", "#15803d", "#b45309", "#0369a1",
)  # fmt: skip
USER_NAMES = (
    "Ada", "Bo", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lena",
    "Milo", "Nia", "Otto", "Pia", "Quinn", "Rosa", "Sami", "Tess", "Uma", "Vic", "Wren",
    "Xia", "Yuri", "Zoe", "Abe", "Bea", "Cy", "Dora", "Ezra", "Flo",
)  # fmt: skip


@functools.cache
def load_pool(name: str) -> tuple[str, ...]:
    """Prompts of assets/prompts/<name>.txt: entries are separated by blank lines, # = comment."""
    text = (PROMPTS_DIR / f"{name}.txt").read_text(encoding="utf-8")
    entries = (" ".join(block.split()) for block in text.split("\n\n"))
    return tuple(e for e in entries if e and not e.startswith("#"))


@functools.cache
def load_text(name: str) -> str:
    return " ".join((PROMPTS_DIR / f"{name}.txt").read_text(encoding="utf-8").split())


@dataclass(frozen=True)
class UserProfile:
    """How one simulated user behaves. Times are seconds of the driver's run clock."""

    name: str
    colour: str
    pool: str = "chat"  # assets/prompts/<pool>.txt
    system_prompt: str | None = None  # name of a text in assets/prompts/ sent as system turn
    max_tokens: int = 64
    temperature: float = 0.7
    top_p: float = 0.95
    ignore_eos: bool = False
    think_time: tuple[float, float] = (1.0, 3.0)  # uniform range between two requests
    cancel_after: int | None = None  # aborts on purpose once this many tokens streamed
    max_requests: int | None = None  # None = keep going until the workload stops
    priority: int = 0  # lower runs first, on an engine with scheduling_policy="priority"
    beam_width: int = 1  # >= 2: beam search (greedy, the best beam returned)
    arrives_after: float = 0.0  # seconds added to the arrival process's first time

    def make_prompt(self, rng: random.Random) -> list[dict]:
        messages = [{"role": "user", "content": rng.choice(load_pool(self.pool))}]
        if self.system_prompt:
            messages.insert(0, {"role": "system", "content": load_text(self.system_prompt)})
        return messages

    def make_params(self, rng: random.Random) -> SamplingParams:
        if self.beam_width > 1:
            return SamplingParams(
                max_tokens=self.max_tokens, temperature=0.0, beam_width=self.beam_width,
                ignore_eos=self.ignore_eos,
            )  # fmt: skip
        return SamplingParams(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            ignore_eos=self.ignore_eos,
            seed=rng.randrange(2**31),  # reproducible whatever shares the batch
        )


# -- arrival processes: when each user shows up for the first time ----------------------------
@dataclass(frozen=True)
class AllAtOnce:
    def start_times(self, num_users: int, rng: random.Random) -> list[float]:
        return [0.0] * num_users


@dataclass(frozen=True)
class Poisson:
    rate: float  # users arriving per second

    def start_times(self, num_users: int, rng: random.Random) -> list[float]:
        return list(itertools.accumulate(rng.expovariate(self.rate) for _ in range(num_users)))


@dataclass(frozen=True)
class Bursts:
    size: int  # users per burst
    every: float  # seconds between bursts

    def start_times(self, num_users: int, rng: random.Random) -> list[float]:
        return [(i // self.size) * self.every for i in range(num_users)]


ARRIVALS = ("all at once", "poisson", "bursts")


def make_arrival(kind: str, rate: float = 1.0, burst_size: int = 4):
    if kind == "all at once":
        return AllAtOnce()
    if kind == "poisson":
        return Poisson(rate)
    if kind == "bursts":
        return Bursts(burst_size, every=burst_size / rate)
    raise ValueError(f"arrival must be one of {ARRIVALS}, got {kind!r}")


# -- the users themselves -----------------------------------------------------------------
@dataclass(frozen=True)
class UserView:
    """What the UI shows of a user between (and during) its requests."""

    name: str
    colour: str
    owner: str  # the owner tag of its requests: "user:<name>"
    state: str  # "arriving" | "sending" | "waiting for answer" | "thinking" | "done"
    request_id: str | None  # the latest request (live or finished)
    num_requests: int
    num_cancelled: int  # cancelled on purpose
    next_at: float | None  # run-clock time of its next request


@dataclass
class SimulatedUser:
    profile: UserProfile
    next_at: float | None  # None while a request is out, or when done
    request_id: str | None = None
    num_requests: int = 0
    num_cancelled: int = 0
    cancel_sent: bool = False
    will_cancel: bool = False
    state: str = "arriving"

    @property
    def owner(self) -> str:
        return f"user:{self.profile.name}"

    def view(self) -> UserView:
        p = self.profile
        return UserView(
            p.name, p.colour, self.owner, self.state, self.request_id,
            self.num_requests, self.num_cancelled, self.next_at,
        )  # fmt: skip


# (prompt, params, owner, priority) -> request id
SubmitFn = Callable[[list[dict], SamplingParams, str, int], str]
AbortFn = Callable[[str], None]


@dataclass
class Workload:
    """A set of simulated users on the driver's run clock; see the module docstring."""

    name: str
    profiles: list[UserProfile]
    arrival: object = field(default_factory=AllAtOnce)
    seed: int = 0
    cancel_fraction: float = 0.0  # of requests from users with cancel_after set

    def __post_init__(self):
        self.rng = random.Random(self.seed)
        starts = self.arrival.start_times(len(self.profiles), self.rng)
        self.users = [
            SimulatedUser(p, t + p.arrives_after)
            for p, t in zip(self.profiles, starts, strict=True)
        ]
        self.by_request: dict[str, SimulatedUser] = {}
        self._views = tuple(u.view() for u in self.users)

    def tick(self, now: float, submit: SubmitFn) -> None:
        """Send the requests that are due. Called by the driver thread only."""
        changed = False
        for user in self.users:
            if user.next_at is None or user.next_at > now:
                continue
            p = user.profile
            prompt, params = p.make_prompt(self.rng), p.make_params(self.rng)
            user.will_cancel = p.cancel_after is not None and (
                self.rng.random() < self.cancel_fraction
            )
            user.cancel_sent, user.next_at, user.state = False, None, "waiting for answer"
            user.num_requests += 1
            user.request_id = submit(prompt, params, user.owner, p.priority)
            self.by_request[user.request_id] = user
            changed = True
        if changed:
            self._publish()

    def on_output(self, out, now: float, abort: AbortFn) -> None:
        """A RequestOutput of one of our requests (primary lane)."""
        user = self.by_request.get(out.request_id)
        if user is None:
            return
        if out.finished:
            if out.stop_reason is not None and out.stop_reason.value == "cancelled":
                user.num_cancelled += user.cancel_sent
            self._request_done(user, out.request_id, now)
        elif (
            user.will_cancel
            and not user.cancel_sent
            and (len(out.token_ids) >= user.profile.cancel_after)
        ):
            user.cancel_sent = True
            abort(out.request_id)

    def on_rejected(self, request_id: str, now: float) -> None:
        user = self.by_request.get(request_id)
        if user is not None:
            self._request_done(user, request_id, now)

    def _request_done(self, user: SimulatedUser, request_id: str, now: float) -> None:
        del self.by_request[request_id]
        p = user.profile
        if p.max_requests is not None and user.num_requests >= p.max_requests:
            user.state, user.next_at = "done", None
        else:
            user.state, user.next_at = "thinking", now + self.rng.uniform(*p.think_time)
        self._publish()

    def _publish(self) -> None:
        self._views = tuple(u.view() for u in self.users)

    def views(self) -> tuple[UserView, ...]:
        """Immutable, safe to read from any thread."""
        return self._views

    @property
    def is_done(self) -> bool:
        return all(u.state == "done" for u in self.users)


def make_profiles(num_users: int, template: UserProfile | list[UserProfile]) -> list[UserProfile]:
    """num_users profiles named and coloured in turn, cycling through the template(s)."""
    templates = template if isinstance(template, list) else [template]
    return [
        replace(
            templates[i % len(templates)],
            name=USER_NAMES[i % len(USER_NAMES)] + ("" if i < len(USER_NAMES) else str(i)),
            colour=USER_COLOURS[i % len(USER_COLOURS)],
        )
        for i in range(num_users)
    ]
