"""The playground's entry point: args -> load engine -> driver -> board (+ routes) -> serve.

    python app.py [MODEL | --model default|DIR|HUB_ID] [--device auto|cpu|cuda] [--port 7860] ...
    python app.py --engine-url http://HOST:PORT [--engine-url URL2] [--engine-api-key KEY]

With --engine-url the board loads no model: its requests go to that OpenAI-compatible server
(vLLM, say; two URLs: compare mode) and its charts read the server's /metrics
(playground/remote/).

The EngineConfig names are flags (dashed), and so are the public limits of the board and the
API (PublicLimits: --limit-prompt-tokens, --limit-max-tokens, ...). `vllm serve`'s spellings
work too: the model as the first argument, --served-model-name, --api-key ($VLLM_API_KEY),
--num-gpu-blocks-override, --no-enable-prefix-caching, --no-enable-chunked-prefill.
`create_app(driver)` returns the FastAPI app with the Gradio board mounted at "/" and
`GET /healthz`, so other routes can join the same server.
"""

import argparse
import logging
import os
import secrets
import time

T_START = time.monotonic()  # `make run` -> page answering is measured from here

import playground  # noqa: E402, F401 - before gradio: see playground/gradio_import.py

# isort: split
import gradio as gr  # noqa: E402
import uvicorn  # noqa: E402
from fastapi import FastAPI  # noqa: E402

from engine import EngineConfig, LLMEngine  # noqa: E402
from engine.config import ATTENTION_BACKENDS, BATCHING, MODEL_IMPLS, SCHEDULING_POLICIES  # noqa: E402
from engine.cpu.openmp import lower_priority  # noqa: E402
from playground.access.limits import PublicLimits  # noqa: E402
from playground.access.public import is_public  # noqa: E402
from playground.access.seat import PRESENTER_PARAM, ControlMode, Seat, SeatPolicy  # noqa: E402
from playground.driver import MAX_PAUSE_S, MIN_PACE, STUCK_AFTER_S, EngineDriver  # noqa: E402
from playground.driver.clock import parse_pace  # noqa: E402
from playground.remote.connection import MAX_CONCURRENCY, Connection, normalize_url  # noqa: E402
from playground.remote.engine import RemoteEngine, remote_lanes  # noqa: E402
from playground.server.api import refuse_other_methods, register_api  # noqa: E402
from playground.server.options import ServingOptions  # noqa: E402
from playground.ui import build_ui, load_asset  # noqa: E402
from playground.workload.scenarios import SCENARIOS  # noqa: E402

DEFAULT_PORT = 7860
PLAYGROUND_KV_BLOCKS = 512  # 8192 tokens of 16: enough for the presets, and a readable block map


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Continuous batching playground (Gradio board).")
    p.add_argument(
        "model_tag", nargs="?", metavar="MODEL", help="the model, as `vllm serve` takes it"
    )
    p.add_argument("--model", default=None, help="'default' (SmolLM2-135M), a dir or hub id")
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
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--dtype", default="auto", help="auto (CPU float32, CUDA bfloat16) | bfloat16")
    p.add_argument("--host", default=None, help="default 127.0.0.1; 0.0.0.0 on a Space")
    p.add_argument("--port", type=int, default=None, help="default $PORT or 7860")
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument(
        "--num-kv-blocks", "--num-gpu-blocks-override", type=int, default=PLAYGROUND_KV_BLOCKS
    )
    p.add_argument("--block-size", type=int, default=None)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--batching", choices=list(BATCHING), default=None)
    p.add_argument(
        "--scheduling-policy",
        choices=list(SCHEDULING_POLICIES),
        default=None,
        help="fcfs (default): arrival order; priority: lower priority values first",
    )
    p.add_argument("--kv-backend", choices=["paged", "hf_cache"], default=None)
    p.add_argument(
        "--model-impl",
        choices=list(MODEL_IMPLS),
        default=None,
        help="auto (default): the engine's fused forward for Llama-family models, else the "
        "transformers modules",
    )
    p.add_argument(
        "--attention-backend",
        choices=list(ATTENTION_BACKENDS),
        default=None,
        help="paged attention. auto (default): the engine's C kernels (decodes, prefill chunks) "
        "reading the KV blocks in place where they build (CPU, a C compiler), else sdpa "
        "(gather + torch SDPA)",
    )
    for knob in ("chunked_prefill", "prefix_caching"):  # vLLM's --[no-]enable-..., and ours
        flag, dest = knob.replace("_", "-"), f"enable_{knob}"
        p.add_argument(f"--enable-{flag}", action=argparse.BooleanOptionalAction, dest=dest)
        p.add_argument(
            f"--no-{flag}", action="store_false", dest=dest, help=f"= --no-enable-{flag}"
        )
    p.add_argument(
        "--torch-compile",
        action="store_true",
        help="compile the model's forward before serving: faster steps, minutes to start on a CPU",
    )
    p.add_argument("--max-waiting", type=int, default=None, help="waiting requests before 429")
    p.add_argument(
        "--pace", default="max", type=_pace, help=f"'max' or steps per second, >= {MIN_PACE:g}"
    )
    limits = PublicLimits.defaults(public=is_public())  # a Space keeps its per-visitor limit
    p.add_argument("--limit-prompt-tokens", type=int, default=limits.max_prompt_tokens)
    p.add_argument("--limit-max-tokens", type=int, default=limits.max_tokens)
    p.add_argument("--limit-n", type=int, default=limits.max_n)
    p.add_argument(
        "--limit-in-flight",
        type=int,
        default=limits.max_in_flight,
        help="unfinished requests per browser session or API client",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        default=limits.default_timeout_s,
        help="seconds; for requests that set no timeout_s (0 = none)",
    )
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
        "driver's 0 they no longer pre-empt the engine's OpenMP threads mid-op; measured: "
        "streams 3.9%% faster to a client that costs no CPU, answers the board's ticks 2-5x "
        "later",
    )
    p.add_argument(
        "--stuck-after", type=float, default=STUCK_AFTER_S, help="seconds before a step is stuck"
    )
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
        type=int,
        default=MAX_CONCURRENCY,
        help="streams open at once per server; more wait on this side",
    )
    seat = SeatPolicy()
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
    p.add_argument("--seat-term", type=_seconds, default=seat.term_s,
                   help="seconds one visitor holds the seat while others queue")  # fmt: skip
    p.add_argument("--seat-idle", type=_seconds, default=seat.idle_s,
                   help="seconds without a control action before the seat passes")  # fmt: skip
    p.add_argument("--max-pause", type=_seconds, default=MAX_PAUSE_S,
                   help="seconds after which a pause resumes by itself")  # fmt: skip
    p.add_argument(
        "--scenario",
        choices=sorted(SCENARIOS),
        default=None,
        help="start this preset as soon as the model is loaded",
    )
    args = p.parse_args(argv)
    if args.model_tag and args.model and args.model_tag != args.model:
        p.error(f"the model is given twice: {args.model_tag!r} and --model {args.model!r}")
    args.model = args.model_tag or args.model or "default"
    if args.engine_url and len(args.engine_url) > 2:
        p.error("--engine-url: at most two servers (compare mode)")
    try:
        args.engine_url = [normalize_url(u) for u in args.engine_url or ()]
    except ValueError as exc:
        p.error(f"--{exc}")
    if args.engine_concurrency < 1:
        p.error("--engine-concurrency: must be >= 1")
    return args


def engine_config(args: argparse.Namespace) -> EngineConfig:
    overrides = {
        name: getattr(args, name)
        for name in (
            "max_num_seqs",
            "max_num_batched_tokens",
            "num_kv_blocks",
            "block_size",
            "max_model_len",
            "batching",
            "scheduling_policy",
            "kv_backend",
            "model_impl",
            "attention_backend",
            "max_waiting",
            "enable_chunked_prefill",
            "enable_prefix_caching",
        )
        if getattr(args, name) is not None
    }
    if args.torch_compile:
        overrides["torch_compile"] = True
    return EngineConfig(**overrides)


def public_limits(args: argparse.Namespace) -> PublicLimits:
    return PublicLimits(
        max_prompt_tokens=args.limit_prompt_tokens,
        max_tokens=args.limit_max_tokens,
        max_n=args.limit_n,
        max_in_flight=args.limit_in_flight,
        default_timeout_s=args.request_timeout or None,
    )


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def _pace(text: str) -> str:
    try:
        parse_pace(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def control_seat(args: argparse.Namespace) -> Seat:
    """Who drives the board: --controls (default: locked if a presenter key is given, seat on
    a Space, else open) and the seat's times."""
    default = "locked" if args.presenter_key else "seat" if os.environ.get("SPACE_ID") else "open"
    mode = ControlMode(args.controls or default)
    key = args.presenter_key
    if mode is ControlMode.LOCKED and not key:
        key = secrets.token_urlsafe(12)
    return Seat(mode, SeatPolicy(term_s=args.seat_term, idle_s=args.seat_idle), key)


def resolve_host_port(args: argparse.Namespace) -> tuple[str, int]:
    host = args.host or ("0.0.0.0" if os.environ.get("SPACE_ID") else "127.0.0.1")
    env_port = os.environ.get("PORT") or os.environ.get("GRADIO_SERVER_PORT")
    return host, args.port or int(env_port or DEFAULT_PORT)


def proxy_trust(args: argparse.Namespace) -> dict:
    """uvicorn's settings for X-Forwarded-For: trusted only from --forwarded-allow-ips, or from
    anyone on a Space (whose proxy is the only way in). Untrusted, every client behind a proxy
    would be one client: one in-flight budget, one card."""
    ips = args.forwarded_allow_ips or ("*" if os.environ.get("SPACE_ID") else None)
    return {"proxy_headers": ips is not None, "forwarded_allow_ips": ips}


def create_app(
    driver: EngineDriver,
    served_model_names: list[str] | None = None,
    api_keys: list[str] | None = None,
    api: bool = True,
    seat: Seat | None = None,
    stream_interval: int = 1,
) -> FastAPI:
    """FastAPI app: the board at "/", GET /healthz; add more routes to it before serving.
    api=False (a board over a remote server): no /v1 routes and no /metrics of its own;
    clients talk to that server directly. `seat`: who drives the board (default: anyone).
    `stream_interval`: new tokens per streamed API chunk (vLLM's --stream-interval)."""
    app = FastAPI(
        title="Continuous batching playground",
        summary="OpenAI-compatible API of the shared engine the board shows",
    )

    @app.get("/healthz")
    def healthz() -> dict:
        snap = driver.snapshot()
        return {
            "status": "ok" if driver.is_alive else "driver stopped",
            "step": snap.step,
            "waiting": snap.num_waiting,
            "running": snap.num_running,
            "generated_tokens": snap.totals.num_generated_tokens,
            "tokens_per_s": round(snap.totals.tokens_per_s, 2),  # of engine busy time
        }

    if api:  # /v1 (OpenAI-compatible), /health and /metrics, before the mount
        keep_alive = ServingOptions.defaults(public=is_public()).sse_keep_alive_interval
        register_api(app, driver, model_name=served_model_names, api_keys=api_keys or (),
                     stream_interval=stream_interval,
                     sse_keep_alive_interval=keep_alive)  # fmt: skip
        refuse_other_methods(app)
    demo = build_ui(driver, seat)
    theme = gr.themes.Soft(primary_hue="indigo", neutral_hue="slate")
    css = load_asset("style.css")
    return gr.mount_gradio_app(app, demo, path="/", css=css, theme=theme, footer_links=[])


def main(argv=None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per remote request
    args = parse_args(argv)
    config = engine_config(args)  # validated before the slow load
    limits = public_limits(args)
    host, port = resolve_host_port(args)
    seat = control_seat(args)
    connections = [
        Connection(url, args.engine_api_key, args.engine_model,
                   max_concurrency=args.engine_concurrency)
        for url in args.engine_url or ()
    ]  # fmt: skip
    if connections:
        engine, lanes = RemoteEngine(connections[0], config), remote_lanes(connections)
        serving = " and ".join(c.url for c in connections)
    else:
        engine = LLMEngine.from_pretrained(
            args.model, device=args.device, dtype=args.dtype, **_fields(config)
        )
        lanes, serving = None, f"model {args.model!r}"
    driver = EngineDriver(engine, pace=args.pace, base_config=config, limits=limits,
                          stuck_after_s=args.stuck_after, lanes=lanes,
                          max_pause_s=args.max_pause)  # fmt: skip
    seat.on_handover = driver.resume  # a pause ends when its holder's seat does
    if args.scenario:
        SCENARIOS[args.scenario].start(driver)
    app = create_app(driver, args.served_model_name, args.api_key, api=not connections, seat=seat,
                     stream_interval=args.stream_interval)  # fmt: skip
    uv_config = uvicorn.Config(app, host=host, port=port, log_level="warning", **proxy_trust(args))
    # After the driver thread has started (it keeps nice 0): the event loop and the threads it
    # starts from now on (Gradio's callbacks) may step aside for the engine (engine/cpu/openmp.py).
    lower_priority(args.serving_nice)
    server = _Server(uv_config)
    url = f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"
    server.banner = f"Playground ready at {url}  ({serving}; Ctrl-C stops)"
    if seat.mode is ControlMode.LOCKED:
        server.banner += (
            f"\nPresenter (controls locked to it): {url}/?{PRESENTER_PARAM}={seat.presenter_key}"
        )
    try:
        server.run()  # shuts down gracefully on Ctrl-C / SIGTERM
    except KeyboardInterrupt:  # uvicorn re-raises the signal once it has shut down
        pass
    finally:
        driver.stop()
        for connection in connections:
            connection.close()
        print("Playground stopped.", flush=True)


class _Server(uvicorn.Server):
    """Prints the URL once the socket listens, so whoever reads it can connect at once."""

    banner = ""

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started:
            print(f"{self.banner} [{time.monotonic() - T_START:.1f} s after start]", flush=True)


def _fields(config: EngineConfig) -> dict:
    return {name: getattr(config, name) for name in EngineConfig.field_names()}


if __name__ == "__main__":
    main()
