"""EngineConfig: the knobs of the scheduler, the KV cache and the model runner."""

from dataclasses import dataclass, field, fields

from engine.validation import FieldError, check_choice, check_int

BATCHING = ("continuous", "static")
SCHEDULING_POLICIES = ("fcfs", "priority")
KV_BACKENDS = ("paged", "hf_cache")
MODEL_IMPLS = ("auto", "native", "transformers")
ATTENTION_BACKENDS = ("auto", "paged_kernel", "sdpa")


def _knob(default, help: str, choices: tuple | None = None):
    """A field with its default, its help text and, for a choice, the values it takes (the
    command line builds one flag per field from these)."""
    return field(default=default, metadata={"help": help, "choices": choices})


@dataclass(slots=True)
class EngineConfig:
    """Every field is a flag of the command line (dashed), with its metadata's help text."""

    max_num_seqs: int = _knob(32, "sequences in one step's batch")
    max_num_batched_tokens: int = _knob(512, "token budget of one step (prefill chunks + decodes)")
    block_size: int = _knob(16, "tokens per KV block")
    num_kv_blocks: int | None = _knob(None, "KV blocks in the pool; None = sized from free memory")
    max_model_len: int | None = _knob(None, "longest prompt + output; None = the model's window")
    batching: str = _knob("continuous", "static: admit a new batch only when none runs", BATCHING)
    scheduling_policy: str = _knob(
        "fcfs",
        "the waiting queue's order: fcfs (arrival) or priority (lower first, then arrival; a "
        "waiting request may preempt running ones of a lower priority)",
        SCHEDULING_POLICIES,
    )
    kv_backend: str = _knob(
        "paged", "hf_cache: one transformers DynamicCache per sequence", KV_BACKENDS
    )
    enable_chunked_prefill: bool = _knob(True, "a long prompt may span several steps")
    enable_prefix_caching: bool = _knob(True, "reuse full KV blocks of identical prefixes")
    max_waiting: int | None = _knob(
        1024, "add_request refuses past this many waiting requests; None: no limit"
    )
    torch_compile: bool = _knob(
        False, "paged: the step's forward through torch.compile (minutes to start on a CPU)"
    )
    model_impl: str = _knob(
        "auto",
        "paged: native = the engine's fused forward (Llama-family models), transformers = the "
        "model's own modules; auto = native where the family is supported and not compiling",
        MODEL_IMPLS,
    )
    attention_backend: str = _knob(
        "auto",
        "paged attention: paged_kernel = the engine's C kernels (one for decodes, one for "
        "prefill chunks) reading each sequence's blocks in place (CPU; built with the system C "
        "compiler on first use), sdpa = gather the blocks, then torch's SDPA; auto = the "
        "kernels where they build and fit, else sdpa",
        ATTENTION_BACKENDS,
    )

    def __post_init__(self):
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
            check_int(name, getattr(self, name), low=1)
        if self.max_num_batched_tokens < self.max_num_seqs:  # else some decodes would starve
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_num_seqs ({self.max_num_seqs})"
            )
        for name in ("num_kv_blocks", "max_waiting"):  # None: sized from memory; no limit
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), low=1)
        if self.max_model_len is not None:
            check_int("max_model_len", self.max_model_len, low=2)
        check_choice("batching", self.batching, BATCHING)
        if self.scheduling_policy in BATCHING:  # a batching mode given as a queue order
            raise FieldError(
                "scheduling_policy",
                f"scheduling_policy must be one of {SCHEDULING_POLICIES}, got "
                f"{self.scheduling_policy!r} (continuous / static is set by batching=...)",
            )
        check_choice("scheduling_policy", self.scheduling_policy, SCHEDULING_POLICIES)
        check_choice("kv_backend", self.kv_backend, KV_BACKENDS)
        check_choice("model_impl", self.model_impl, MODEL_IMPLS)
        check_choice("attention_backend", self.attention_backend, ATTENTION_BACKENDS)
        for name in ("enable_chunked_prefill", "enable_prefix_caching", "torch_compile"):
            if not isinstance(getattr(self, name), bool):
                raise FieldError(name, f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.model_impl == "native" and self.torch_compile:
            raise FieldError(
                "model_impl",
                "model_impl='native' cannot be compiled: torch_compile=True compiles the "
                "transformers modules (model_impl='transformers' or 'auto')",
            )

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in fields(cls)}
