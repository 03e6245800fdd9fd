"""`vllm serve`'s flags, as this server takes them.

Those that mean something here do the same (docs/cli.md has the table); those that only mean
something on GPUs are accepted and answered with one line saying so (`no_effect_notes`), so a
command line written for `vllm serve` starts the playground unchanged.
"""

import argparse
import json
import re

from playground.cli.light import import_leaf

UVICORN_LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
LOAD_FORMATS = ("auto", "safetensors", "pt")  # vLLM's that transformers' loader can honour
GPU_ONLY = {  # flag -> (argparse keywords, short alias); vllm/engine/arg_utils.py's names
    "--gpu-memory-utilization": ({"type": float}, None),
    "--enforce-eager": ({"action": "store_true"}, None),
    "--tensor-parallel-size": ({"type": int}, "-tp"),
    "--pipeline-parallel-size": ({"type": int}, "-pp"),
    "--data-parallel-size": ({"type": int}, "-dp"),
    "--distributed-executor-backend": ({}, None),
    "--swap-space": ({"type": float}, None),
    "--cpu-offload-gb": ({"type": float}, None),
    "--disable-custom-all-reduce": ({"action": "store_true"}, None),
}


def human_readable_int(value: str) -> int:
    """vLLM's reading of --max-model-len (vllm/utils/argparse_utils.py): 25.6k = 25600
    (k, m, g, t: powers of 1000), 4K = 4096 (K, M, G, T: powers of 1024, whole numbers only),
    else a plain integer."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if not match:
        return int(value)
    number, suffix = match.groups()
    if suffix.islower():
        return int(float(number) * 1000 ** ("kmgt".index(suffix) + 1))
    if "." in number:
        raise argparse.ArgumentTypeError(
            f"decimals are not allowed with binary suffixes like {suffix}; did you mean "
            f"{number}{suffix.lower()}?"
        )
    return int(number) * 1024 ** ("KMGT".index(suffix) + 1)


def human_readable_int_or_auto(value: str) -> int | None:
    """vLLM's reading of --max-model-len (vllm/utils/argparse_utils.py): -1 or auto is the
    model's own window, capped by what the KV cache holds (vllm/config/model.py), which is
    EngineConfig's None; else human_readable_int."""
    value = value.strip()
    if value == "-1" or value.lower() == "auto":
        return None
    return human_readable_int(value)


def add_vllm_flags(parser: argparse.ArgumentParser) -> None:
    _add_model_flags(parser.add_argument_group("the model (vllm serve's flags)"))
    _add_frontend_flags(parser.add_argument_group("the HTTP server (vllm serve's flags)"))
    gpu = parser.add_argument_group(
        "GPU-only flags of vllm serve: accepted, no effect here", ", ".join(GPU_ONLY)
    )
    for flag, (kwargs, short) in GPU_ONLY.items():
        names = (flag, short) if short else (flag,)
        gpu.add_argument(*names, default=None, help=argparse.SUPPRESS, **kwargs)


def _add_model_flags(group) -> None:
    group.add_argument("--tokenizer", help="the tokenizer's dir or hub id (default: the model's)")
    group.add_argument("--revision", help="the model's branch, tag or commit on the hub")
    group.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="run the model's own code from the hub (its config asks for it)",
    )
    group.add_argument("--download-dir", help="where hub downloads go (default: the HF cache)")
    group.add_argument("--hf-token", help="token for gated or private hub models ($HF_TOKEN)")
    group.add_argument(
        "--load-format",
        choices=LOAD_FORMATS,
        default="auto",
        help="auto: safetensors where there are any, else .bin",
    )
    group.add_argument(
        "--kv-cache-dtype",
        default="auto",
        help="the KV cache is kept in the model's dtype: auto, or that dtype's "
        "name (float32, bfloat16, ...); fp8 and the like are refused",
    )
    group.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seeds the sampler's generator for requests without a seed of "
        "their own (default: random)",
    )
    group.add_argument(
        "--max-logprobs",
        type=int,
        default=None,
        help="the most logprobs (top_logprobs) a request may ask for per token, 0 to the "
        "engine's cap of 20, or -1: vLLM's no cap, the engine's cap here (default: 20, as "
        "vLLM); past it a request gets vLLM's 400",
    )
    group.add_argument(
        "--chat-template",
        default=None,
        help="a Jinja chat template: a file's path or the template itself",
    )
    group.add_argument(
        "--generation-config",
        default="auto",
        help="the API's sampling defaults: auto (the model's generation config), vllm "
        "(none) or a folder holding generation_config.json",
    )


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


FRONTEND_FLAGS = {  # vllm/entrypoints/launchers/cli_args.py's names, defaults and types
    "--root-path": {"help": "the path prefix a proxy serves this app under"},
    "--allowed-origins": {
        "type": json.loads,
        "help": "origins browsers may call the API from (CORS), as JSON: '[\"*\"]'",
    },
    "--uvicorn-log-level": {
        "choices": UVICORN_LOG_LEVELS,
        "default": "warning",
        "help": "uvicorn's log level (default: warning)",
    },
    "--disable-log-stats": {
        "action": "store_true",
        "help": "no periodic log line of throughput, queue lengths and KV cache use",
    },
    "--enable-log-requests": {
        "action": argparse.BooleanOptionalAction,
        "default": False,
        "help": "one log line per API request",
    },
    "--sse-keep-alive-interval": {
        "type": _non_negative,
        "help": "seconds of a quiet stream before a keep-alive comment; 0: none "
        "(default: the server's)",
    },
    "--strict-request-fields": {
        "action": "store_true",
        "help": "answer 400 to a request field the server does not know (default: ignore it "
        "with a log line, as vllm serve does)",
    },
    "--disable-fastapi-docs": {
        "action": "store_true",
        "help": "no /docs, /redoc and /openapi.json",
    },
}


def _add_frontend_flags(group) -> None:
    for flag, kwargs in FRONTEND_FLAGS.items():
        group.add_argument(flag, **kwargs)


def no_effect_notes(args: argparse.Namespace) -> list[str]:
    """One line for each GPU-only flag given (what it would do on vLLM, and that it does
    nothing here), and for a vLLM value this engine honours in part."""
    notes = []
    if args.max_logprobs == -1:
        most = import_leaf("engine.sampling_params").MAX_LOGPROBS
        notes.append(f"--max-logprobs -1: no cap in vLLM; this engine returns at most {most} "
                     f"logprobs per token, so requests may ask for up to {most}")  # fmt: skip
    for flag in GPU_ONLY:
        value = getattr(args, flag[2:].replace("-", "_"))
        if value in (None, False):
            continue
        note = f"{flag}: a GPU setting of vLLM; no effect on this engine"
        if flag == "--tensor-parallel-size" and value > 1:
            note += "; to serve over several GPUs, run vLLM there and give its URL as --engine-url"
        notes.append(note)
    return notes
