"""StructuredOutputsParams: the grammar a request's output must follow (vLLM's fields)."""

import json as json_module
from dataclasses import dataclass

from engine.validation import FieldError

KINDS = ("json", "regex", "choice", "grammar", "json_object")
MAX_SPEC_CHARS = 65536  # a schema, regex or grammar longer than this is refused
MAX_CHOICES = 256


@dataclass(slots=True)
class StructuredOutputsParams:
    """Exactly one of the constraint fields is set, as in vLLM's StructuredOutputsParams.

    json: a JSON schema (dict, or its JSON text); regex: a regular expression the whole
    output matches; choice: the output is one of these strings; grammar: an EBNF grammar
    (GBNF, with a `root` rule); json_object: any JSON object. disable_any_whitespace
    leaves no optional whitespace between JSON tokens.
    """

    json: str | dict | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False

    def __post_init__(self):
        if isinstance(self.choice, tuple):
            self.choice = list(self.choice)
        set_kinds = [k for k in KINDS if getattr(self, k) is not None]
        if len(set_kinds) != 1:
            raise FieldError(
                "structured_outputs",
                f"structured_outputs must set exactly one of {', '.join(KINDS)}, got "
                f"{', '.join(set_kinds) or 'none'}",
            )
        getattr(self, f"_check_{set_kinds[0]}")()
        if not isinstance(self.disable_any_whitespace, bool):
            _refuse("disable_any_whitespace", "must be a bool", self.disable_any_whitespace)

    @property
    def kind(self) -> str:
        return next(k for k in KINDS if getattr(self, k) is not None)

    @property
    def key(self) -> tuple:
        """What the compiled grammar depends on: the cache key."""
        spec = getattr(self, self.kind)
        if self.kind == "json":
            spec = json_module.dumps(self.schema, sort_keys=True)
        elif self.kind == "choice":
            spec = tuple(spec)
        return self.kind, spec, self.disable_any_whitespace

    @property
    def schema(self) -> dict:
        """The JSON schema of `json`, parsed."""
        return json_module.loads(self.json) if isinstance(self.json, str) else self.json

    def _check_json(self) -> None:
        if isinstance(self.json, str):
            _check_text("json", self.json)
            try:
                schema = json_module.loads(self.json)
            except ValueError as exc:
                _refuse("json", f"must be a JSON schema, not invalid JSON ({exc})", self.json)
        else:
            schema = self.json
        if not isinstance(schema, dict | bool):
            _refuse("json", "must be a JSON schema (an object)", self.json)
        if len(json_module.dumps(schema)) > MAX_SPEC_CHARS:
            _refuse("json", f"must be at most {MAX_SPEC_CHARS} characters as JSON", "...")

    def _check_regex(self) -> None:
        _check_text("regex", self.regex)

    def _check_grammar(self) -> None:
        _check_text("grammar", self.grammar)

    def _check_choice(self) -> None:
        ok = isinstance(self.choice, list) and 0 < len(self.choice) <= MAX_CHOICES
        if not ok or not all(isinstance(c, str) and c for c in self.choice):
            _refuse("choice", f"must be a list of 1 to {MAX_CHOICES} non-empty str", self.choice)
        if sum(len(c) for c in self.choice) > MAX_SPEC_CHARS:
            _refuse("choice", f"must hold at most {MAX_SPEC_CHARS} characters", "...")

    def _check_json_object(self) -> None:
        if self.json_object is not True:
            _refuse("json_object", "must be true when set", self.json_object)


def _check_text(name: str, value) -> None:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_SPEC_CHARS:
        _refuse(name, f"must be a non-empty str of at most {MAX_SPEC_CHARS} characters", value)


def _refuse(name: str, rule: str, value) -> None:
    field = f"structured_outputs.{name}"
    raise FieldError(field, f"{field} {rule}, got {value!r:.80}")
