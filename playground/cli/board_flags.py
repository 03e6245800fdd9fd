"""The playground's own flags: where it listens, who drives the board, the public limits, a
remote server instead of the engine. Defaults that live in heavy modules (the public limits,
the remote connection) are left as None here: those modules apply their own."""

import argparse
import os

from playground.access.seat import PRESENTER_PARAM, ControlMode, SeatPolicy
from playground.cli.light import import_leaf


def add_server_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--served-model-name",
        nargs="+",
        default=None,
        help="the API's name(s) of the model: it answers with the first and accepts all; "
        "default the model's short name, its hub id accepted too",
    )
    p.add_argument(
        "--api-key",
        nargs="+",
        default=[os.environ["VLLM_API_KEY"]] if os.environ.get("VLLM_API_KEY") else None,
        help="/v1 routes want `Authorization: Bearer <key>` (default $VLLM_API_KEY; none: open)",
    )
    p.add_argument(
        "--forwarded-allow-ips",
        default=None,
        help="addresses of a proxy whose X-Forwarded-For to trust (uvicorn's; '*' on a Space; "
        "default none elsewhere, so each client is known by its own address)",
    )
    p.add_argument("--host", default=None, help="default 127.0.0.1; 0.0.0.0 on a Space")
    p.add_argument("--port", type=int, default=None, help="default $PORT or 7860")
    p.add_argument(
        "--stream-interval",
        type=_at_least_one,
        default=1,
        help="vLLM's: new tokens per streamed API chunk (the first and the last go at once); "
        "fewer, larger chunks cost the server and its clients less CPU per token",
    )
    p.add_argument(
        "--serving-nice",
        type=int,
        choices=range(20),
        metavar="0-19",
        default=0,
        help="nice value of the threads that serve the page and the API (Linux): above the "
        "driver's 0 they no longer pre-empt the engine's OpenMP threads mid-op, and answer "
        "the board's ticks later",
    )


def add_limit_flags(p: argparse.ArgumentParser) -> None:
    """PublicLimits' fields; left out, PublicLimits' defaults (playground/access/limits.py)."""
    group = p.add_argument_group("public limits of one visitor (default: PublicLimits')")
    group.add_argument(
        "--public",
        action="store_true",
        help="serve as a public server does (as on a Space): a per-visitor in-flight limit and "
        "SSE keep-alive comments by default",
    )
    group.add_argument("--limit-prompt-tokens", type=_at_least_one, default=None)
    group.add_argument("--limit-max-tokens", type=_at_least_one, default=None)
    group.add_argument("--limit-n", type=_at_least_one, default=None)
    group.add_argument(
        "--limit-in-flight",
        type=_at_least_one,
        default=None,
        help="unfinished requests per browser session or API client",
    )
    group.add_argument(
        "--max-num-queued-reqs",
        type=_at_least_zero,
        default=None,
        help="vLLM's admission limit: unfinished requests (waiting + running; n completions "
        "count n) past which a request gets a 503 (default: none; 1024 on a public server)",
    )
    group.add_argument(
        "--request-timeout",
        type=float,
        default=None,
        help="seconds; for requests that set no timeout_s (0 = none)",
    )


def add_board_flags(p: argparse.ArgumentParser) -> None:
    clock = import_leaf("playground.driver.clock")
    seat = SeatPolicy()
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--dtype", default="auto", help="auto (CPU float32, CUDA bfloat16) | bfloat16")
    p.add_argument(
        "--pace",
        default="max",
        type=_checked(clock.parse_pace),
        help=f"'max' or steps per second, >= {clock.MIN_PACE:g}",
    )
    p.add_argument(
        "--stuck-after",
        type=_seconds,
        default=None,
        help="seconds before a step is reported stuck (default: the driver's watchdog's)",
    )
    p.add_argument(
        "--controls",
        choices=[m.value for m in ControlMode],
        default=None,
        help="who drives the board: open (anyone; default locally), seat (one visitor at a "
        "time; default on a Space), locked (only the presenter)",
    )
    p.add_argument(
        "--presenter-key",
        default=None,
        help=f"the key of the presenter's URL (?{PRESENTER_PARAM}=KEY); implies --controls "
        "locked. Locked without it: a random key, printed at start",
    )
    for flag, default, help_text in (
        ("--seat-term", seat.term_s, "seconds one visitor holds the seat while others queue"),
        ("--seat-idle", seat.idle_s, "seconds without a control action before the seat passes"),
        ("--max-pause", clock.MAX_PAUSE_S, "seconds after which a pause resumes by itself"),
    ):
        p.add_argument(
            flag, type=_seconds, default=default, help=f"{help_text} (default: {default:g})"
        )
    p.add_argument(
        "--scenario",
        default=None,
        metavar="NAME",
        help="start this preset as soon as the model is loaded (playground/workload/scenarios.py)",
    )


def add_remote_flags(p: argparse.ArgumentParser) -> None:
    remote = p.add_argument_group("a remote server instead of the in-process engine")
    remote.add_argument(
        "--engine-url",
        action="append",
        default=None,
        metavar="URL",
        help="an OpenAI-compatible server (e.g. vllm serve) the board sends its requests to; "
        "give it twice for compare mode",
    )
    remote.add_argument("--engine-api-key", default=None, help="sent as 'Authorization: Bearer'")
    remote.add_argument("--engine-model", default=None, help="default: the server's first model")
    remote.add_argument(
        "--engine-concurrency",
        type=_at_least_one,
        default=None,
        help="streams open at once per server; more wait on this side",
    )


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def _at_least_zero(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _checked(parse):
    """An argparse type that keeps the text once `parse` accepts it."""

    def check(text: str) -> str:
        try:
            parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    return check
