"""Field checks shared by the validated dataclasses (EngineConfig, SamplingParams)."""


class FieldError(ValueError):
    """A bad value of one field: `field` names it, and the message starts with that name."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def check_int(name: str, value, low: int, high: int | None = None) -> None:
    """FieldError unless `value` is an int (not a bool) in [low, high]."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
    if not ok or (high is not None and value > high):
        rng = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise FieldError(name, f"{name} must be an integer {rng}, got {value!r}")


def check_choice(name: str, value, choices: tuple) -> None:
    """FieldError unless `value` is one of `choices`."""
    if value not in choices:
        raise FieldError(name, f"{name} must be one of {choices}, got {value!r}")
