"""Field checks shared by the validated dataclasses (EngineConfig, SamplingParams)."""


def check_int(name: str, value, low: int, high: int | None = None) -> None:
    """ValueError naming the field unless `value` is an int (not a bool) in [low, high]."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
    if not ok or (high is not None and value > high):
        rng = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be an integer {rng}, got {value!r}")
