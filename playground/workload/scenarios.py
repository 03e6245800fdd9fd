"""Named workload presets: who the users are, how they arrive, and the engine knobs to show off.

Each preset is one click in the UI (or `app.py --scenario`). `Scenario.workload()` builds the
users; `engine_overrides` are EngineConfig field names applied on top of the command line's
config (`engine_config()`); `start()` resets the driver with both, the one way a preset starts.
"""

from dataclasses import dataclass, field, replace

from engine import EngineConfig
from playground.workload.users import UserProfile, Workload, make_arrival, make_profiles


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    what_to_watch: str  # what runs (users, arrivals), shown next to the controls and the
    # lesson's question: never the answer (the lesson explains after its verdict)
    users: list[UserProfile] | UserProfile  # templates, cycled over num_users
    num_users: int = 8
    arrival: str = "all at once"  # see users.ARRIVALS
    arrival_rate: float = 2.0  # users per second (poisson, bursts)
    burst_size: int = 4
    cancel_fraction: float = 0.0  # of requests from users that have cancel_after set
    engine_overrides: dict = field(default_factory=dict)
    compare: bool = False  # run static and continuous side by side

    def __post_init__(self):
        unknown = sorted(set(self.engine_overrides) - EngineConfig.field_names())
        if unknown:
            raise ValueError(f"engine_overrides: {unknown[0]!r} is not an EngineConfig field")

    def engine_config(self, base: EngineConfig) -> EngineConfig:
        """`base` (the command line's config) with this preset's engine knobs."""
        return replace(base, **self.engine_overrides)

    def start(self, driver, config: EngineConfig | None = None, compare: bool | None = None,
              workload: Workload | None = None) -> None:  # fmt: skip
        """Reset `driver` to this preset: fresh engines of `config` (default: the preset's
        knobs on the driver's base config), its users on a fresh clock."""
        driver.reset(
            config or self.engine_config(driver.base_config),
            compare=self.compare if compare is None else compare,
            workload=workload or self.workload(),
        )

    def workload(
        self,
        num_users: int | None = None,
        arrival: str | None = None,
        arrival_rate: float | None = None,
        seed: int = 0,
    ) -> Workload:
        n = self.num_users if num_users is None else num_users
        process = make_arrival(
            arrival or self.arrival,
            self.arrival_rate if arrival_rate is None else arrival_rate,
            self.burst_size,
        )
        profiles = make_profiles(n, self.users)
        return Workload(self.key, profiles, process, seed, self.cancel_fraction)


_chatty = UserProfile("", "", pool="chat", max_tokens=64, think_time=(1.0, 4.0), cancel_after=10)
# chat burst: answers of different lengths, so users leave the batch at different steps
_bursty = [replace(_chatty, max_tokens=m) for m in (24, 96, 40, 64, 16, 80, 32, 48)]
# long vs short: each reader pastes a different passage, once the chats are decoding
_readers = [
    UserProfile("", "", pool="long", max_tokens=48, think_time=(2.0, 5.0), prompt_index=i,
                arrives_after=1.0)
    for i in range(2)
]  # fmt: skip
_patron = UserProfile(
    "", "", pool="library_questions", system_prompt="system_prompt", max_tokens=40,
    think_time=(0.5, 2.0),
)  # fmt: skip
_regular = UserProfile(
    "", "", pool="chat", max_tokens=96, ignore_eos=True, think_time=(0.5, 1.5), priority=1
)
_vip = UserProfile(
    "", "", pool="chat", max_tokens=32, think_time=(1.0, 3.0), priority=0, arrives_after=2.0
)
_beamer = UserProfile("", "", pool="chat", max_tokens=40, beam_width=4, think_time=(1.0, 3.0))
_fixed = [  # static vs continuous: one request each, lengths fixed by ignore_eos
    UserProfile("", "", pool="chat", max_tokens=m, ignore_eos=True, max_requests=1)
    for m in (96, 16, 24, 64, 8, 32, 48, 12)
]

SCENARIOS: dict[str, Scenario] = {
    s.key: s
    for s in (
        Scenario(
            key="chat_burst",
            title="Chat burst",
            what_to_watch="Eight chat users send their first question at the same moment; their "
            "answers are 16 to 96 tokens long, and one in four cancels on purpose after a few "
            "tokens. Each asks again after a short pause.",
            users=_bursty,
            num_users=8,
            cancel_fraction=0.25,
            engine_overrides={"max_num_seqs": 16, "max_num_batched_tokens": 256},
        ),
        Scenario(
            key="long_vs_short",
            title="Long prompts next to short ones",
            what_to_watch="Four users chat; a second later two users each paste a different "
            "long passage (about 280 tokens, more than a step's token budget). Prefix caching "
            "is off, so every prompt token is computed.",
            users=[_chatty] * 4 + _readers,
            num_users=6,
            engine_overrides={
                "max_num_seqs": 16,
                "max_num_batched_tokens": 96,
                "enable_prefix_caching": False,
            },  # fmt: skip
        ),
        Scenario(
            key="kv_pressure",
            title="KV pressure: preemption",
            what_to_watch="Eight users each want a 160-token answer (fixed length) at once, from a "
            "pool of only 40 KV blocks of 16 tokens.",
            users=UserProfile(
                "", "", pool="chat", max_tokens=160, ignore_eos=True, think_time=(1.0, 2.0)
            ),  # fmt: skip
            num_users=8,
            engine_overrides={
                "num_kv_blocks": 40,
                "block_size": 16,
                "max_num_seqs": 8,
                "max_num_batched_tokens": 256,
            },  # fmt: skip
        ),
        Scenario(
            key="prefix_cache",
            title="Shared system prompt: prefix cache",
            what_to_watch="Eight users ask library questions, every one behind the same long "
            "system prompt; they arrive about two a second. Prefix caching is on.",
            users=_patron,
            num_users=8,
            arrival="poisson",
            arrival_rate=2.0,
            engine_overrides={
                "enable_prefix_caching": True,
                "max_num_seqs": 16,
                "max_num_batched_tokens": 256,
            },  # fmt: skip
        ),
        Scenario(
            key="vip_users",
            title="VIP users: priority scheduling",
            what_to_watch="Eight regular users (priority 1) ask for 96-token answers with 4 "
            "seats; two seconds later two VIPs (priority 0) ask too. The waiting queue is "
            "ordered by priority.",
            users=[_regular] * 8 + [_vip] * 2,
            num_users=10,
            engine_overrides={
                "scheduling_policy": "priority",
                "max_num_seqs": 4,
                "max_num_batched_tokens": 256,
            },  # fmt: skip
        ),
        Scenario(
            key="beam_search",
            title="Beam search: shared blocks",
            what_to_watch="Three users ask for beam search (4 beams each) next to three chat "
            "users; KV blocks hold 8 tokens. The KV block map, the step log, the cards and "
            "the inspector show the beams.",
            users=[_beamer, _chatty],
            num_users=6,
            engine_overrides={
                "max_num_seqs": 24,
                "max_num_batched_tokens": 256,
                "block_size": 8,
                "num_kv_blocks": 256,
            },  # fmt: skip
        ),
        Scenario(
            key="static_vs_continuous",
            title="Static vs continuous",
            what_to_watch="The same 16 requests (8 to 96 tokens, fixed lengths) run "
            "through two engines side by side that share one set of weights, one with "
            "static batching, one with continuous.",
            users=_fixed,
            num_users=16,
            engine_overrides={"max_num_seqs": 6, "max_num_batched_tokens": 256},
            compare=True,
        ),
    )
}
DEFAULT_SCENARIO = "chat_burst"
