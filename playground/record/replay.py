"""Replay files: a run's workload, kept to run again (playground/record/rerun.py), under the same
knobs or others.

A `Replay` holds the engine knobs (EngineConfig), whether two lanes compared policies, and
every request the first lane took: its arrival on the run clock (seconds not paused since the
reset), owner, board label, prompt as it was sent (text, chat messages or token ids), every
SamplingParams field (the seed included), priority, when it was cancelled (after how many
tokens, or at what time), and the output it got. `to_json()` / `Replay.from_json()` are the
file (`write()` / `load()`); loading checks every field and names the bad one
(`requests[3].params.temperature ...`). `ReplayLog` is the driver's capture of a run.
"""

import json
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from engine import EngineConfig, FieldError, RequestOutput, SamplingParams

REPLAY_FORMAT = "cb-playground-replay"
REPLAY_VERSION = 1
MAX_REPLAY_REQUESTS = 8_192  # a log keeps the newest this many (the file says it was cut)


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    request_id: str
    arrival_s: float  # run clock
    prompt: object  # str | list[dict] | list[int], as the engine got it
    params: SamplingParams
    owner: str | None = None
    label: str = ""
    priority: int = 0
    cancel_after_tokens: int | None = None  # cancelled with this many tokens streamed
    cancel_at_s: float | None = None  # ... at this time of the run clock
    output: dict | None = None  # {"text", "token_ids", "stop_reason"} of the original

    def to_json(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["params"] = asdict(self.params)
        return d


@dataclass(frozen=True, slots=True)
class Replay:
    config: EngineConfig
    requests: tuple[ReplayRequest, ...]
    compare: bool = False
    workload: str | None = None  # the preset's name, if one ran
    truncated: bool = False  # the log dropped its oldest requests

    def to_json(self) -> dict:
        return {
            "format": REPLAY_FORMAT,
            "version": REPLAY_VERSION,
            "workload": self.workload,
            "compare": self.compare,
            "truncated": self.truncated,
            "engine": asdict(self.config),
            "requests": [r.to_json() for r in self.requests],
        }

    def write(self, path) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_json(), ensure_ascii=False), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path) -> "Replay":
        try:
            obj = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise FieldError("file", f"file is not a readable replay JSON file: {exc}") from None
        return cls.from_json(obj)

    @classmethod
    def from_json(cls, obj) -> "Replay":
        """FieldError naming the first bad field."""
        if not isinstance(obj, dict) or obj.get("format") != REPLAY_FORMAT:
            raise FieldError("format", f"format must be {REPLAY_FORMAT!r}: not a replay file")
        if obj.get("version") != REPLAY_VERSION:
            raise FieldError("version", f"version must be {REPLAY_VERSION}, got "
                                        f"{obj.get('version')!r}")  # fmt: skip
        config = _build("engine", EngineConfig, obj.get("engine"))
        items = obj.get("requests")
        if not isinstance(items, list):
            raise FieldError("requests", "requests must be a list")
        requests = tuple(_request(i, item) for i, item in enumerate(items))
        if len({r.request_id for r in requests}) != len(requests):
            raise FieldError("requests", "requests must have distinct request_id values")
        for name in ("compare", "truncated"):
            if not isinstance(obj.get(name, False), bool):
                raise FieldError(name, f"{name} must be a bool, got {obj.get(name)!r}")
        workload = obj.get("workload")
        if workload is not None and not isinstance(workload, str):
            raise FieldError("workload", f"workload must be a string, got {workload!r}")
        return cls(config, requests, obj.get("compare", False), workload,
                   obj.get("truncated", False))  # fmt: skip


def _build(name: str, kind, value):
    if not isinstance(value, dict):
        raise FieldError(name, f"{name} must be an object of {kind.__name__} fields")
    unknown = sorted(set(value) - {f.name for f in fields(kind)})
    if unknown:
        raise FieldError(f"{name}.{unknown[0]}", f"{name}.{unknown[0]} is not a "
                                                 f"{kind.__name__} field")  # fmt: skip
    try:
        return kind(**value)
    except FieldError as exc:
        raise FieldError(f"{name}.{exc.field}", f"{name}.{exc}") from None
    except (TypeError, ValueError) as exc:
        raise FieldError(name, f"{name}: {exc}") from None


def _request(i: int, item) -> ReplayRequest:
    where = f"requests[{i}]"
    if not isinstance(item, dict):
        raise FieldError(where, f"{where} must be an object")
    unknown = sorted(set(item) - {f.name for f in fields(ReplayRequest)})
    if unknown:
        raise FieldError(f"{where}.{unknown[0]}", f"{where}.{unknown[0]} is not a field")
    rid, arrival, prompt = item.get("request_id"), item.get("arrival_s"), item.get("prompt")
    if not isinstance(rid, str) or not rid:
        raise FieldError(f"{where}.request_id", f"{where}.request_id must be a non-empty string")
    if not _is_number(arrival) or arrival < 0:
        raise FieldError(f"{where}.arrival_s", f"{where}.arrival_s must be a number >= 0, "
                                               f"got {arrival!r}")  # fmt: skip
    if not _is_prompt(prompt):
        what = "a non-empty string, a list of chat messages or a list of token ids"
        raise FieldError(f"{where}.prompt", f"{where}.prompt must be {what}")
    params = _build(f"{where}.params", SamplingParams, item.get("params", {}))
    for name in ("cancel_after_tokens", "priority"):
        v = item.get(name)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise FieldError(f"{where}.{name}", f"{where}.{name} must be an integer, got {v!r}")
    cancel_at = item.get("cancel_at_s")
    if cancel_at is not None and not _is_number(cancel_at):
        raise FieldError(f"{where}.cancel_at_s", f"{where}.cancel_at_s must be a number")
    output = item.get("output")
    if output is not None and not isinstance(output, dict):
        raise FieldError(f"{where}.output", f"{where}.output must be an object")
    return ReplayRequest(rid, float(arrival), prompt, params, item.get("owner"),
                         str(item.get("label") or ""), item.get("priority") or 0,
                         item.get("cancel_after_tokens"), cancel_at, output)  # fmt: skip


def _is_number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _is_prompt(p) -> bool:
    if isinstance(p, str):
        return bool(p)
    if not isinstance(p, list) or not p:
        return False
    if all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        return True
    return all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in p)


def output_of(out: RequestOutput) -> dict:
    first = out.outputs[0]
    reason = first.stop_reason.value if first.stop_reason else None
    return {"text": first.text, "token_ids": list(first.token_ids), "stop_reason": reason}


# -- capture (the driver thread) ----------------------------------------------------------------
class ReplayLog:
    """The requests the first lane took since the last reset, with their outputs."""

    def __init__(self, max_requests: int = MAX_REPLAY_REQUESTS):
        self.max_requests = max_requests
        self.clear()

    def clear(self) -> None:
        self._requests: dict[str, ReplayRequest] = {}
        self.truncated = False

    def submitted(self, rid: str, at: float, prompt, params, owner, label, priority) -> None:
        if isinstance(prompt, tuple):
            prompt = list(prompt)
        self._requests[rid] = ReplayRequest(rid, round(at, 6), prompt, params or SamplingParams(),
                                            owner, label, priority)  # fmt: skip
        if len(self._requests) > self.max_requests:
            del self._requests[next(iter(self._requests))]
            self.truncated = True

    def finished(self, out: RequestOutput, at: float) -> None:
        r = self._requests.get(out.request_id)
        if r is None:
            return
        output = output_of(out)
        cancel = {}
        if output["stop_reason"] == "cancelled":
            n = len(output["token_ids"])
            cancel = {"cancel_after_tokens": n} if n else {"cancel_at_s": round(at, 6)}
        self._requests[out.request_id] = replace(r, output=output, **cancel)

    def replay(self, config: EngineConfig, compare: bool, workload: str | None) -> Replay:
        return Replay(config, tuple(self._requests.values()), compare, workload, self.truncated)
