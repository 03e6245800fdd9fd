"""The playground's entry point: args -> load engine -> driver -> board (+ routes) -> serve.

    python app.py [MODEL | --model default|DIR|HUB_ID] [--device auto|cpu|cuda] [--port 7860] ...
    python app.py --engine-url http://HOST:PORT [--engine-url URL2] [--engine-api-key KEY]

With --engine-url the board loads no model: its requests go to that OpenAI-compatible server
(vLLM, say; two URLs: compare mode) and its charts read the server's /metrics
(playground/remote/).

The flags (playground/cli/, docs/cli.md) are read before anything heavy is imported, so
`--help` and a mistyped flag answer at once: EngineConfig's fields, the public limits, and
`vllm serve`'s own flags. `create_app(driver)` returns the FastAPI app with the Gradio board
mounted at "/" and `GET /health`, so other routes can join the same server.
"""

import gc
import os
import sys
import time
from dataclasses import dataclass

T_START = time.monotonic()  # `make run` -> page answering is measured from here

from playground.access.seat import PRESENTER_PARAM, ControlMode, Seat, SeatPolicy  # noqa: E402
from playground.cli import parse_args  # noqa: E402
from playground.cli.model_source import StartupError, check_model  # noqa: E402
from playground.cli.vllm_flags import no_effect_notes  # noqa: E402

DEFAULT_PORT = 7860
# Ctrl-C / SIGTERM: the streams still open (an open page's board stream and Gradio queue, API
# streams) get this many seconds to end, then are cut; uvicorn alone waits for every page to close.
SHUTDOWN_GRACE_S = 2


@dataclass(frozen=True, slots=True)
class Frontend:
    """vllm serve's settings of the HTTP server (vllm/entrypoints/launchers/cli_args.py)."""

    root_path: str = ""  # the path prefix a proxy serves the app under
    allowed_origins: tuple[str, ...] = ()  # CORS: origins browsers may call from
    docs: bool = True  # /docs, /redoc, /openapi.json
    sse_keep_alive_interval: float | None = None  # None: the server's default
    strict_request_fields: bool = False  # 400 for an unknown request field
    public: bool = False  # --public: keep-alive comments on by default, as on a Space
    log_requests: bool = False  # one log line per API request
    generation_config: str = "auto"  # the requests' sampling defaults: auto, vllm or a folder
    max_logprobs: int | None = None  # logprobs a request may ask for (None: the engine's cap)

    @classmethod
    def from_args(cls, args) -> "Frontend":
        return cls(
            root_path=args.root_path or "",
            allowed_origins=tuple(args.allowed_origins or ()),
            docs=not args.disable_fastapi_docs,
            sse_keep_alive_interval=args.sse_keep_alive_interval,
            strict_request_fields=args.strict_request_fields,
            public=args.public,
            log_requests=args.enable_log_requests,
            generation_config=args.generation_config,
            max_logprobs=args.max_logprobs,
        )


def main(argv=None) -> None:
    args = parse_args(argv)  # torch-free: --help and a bad flag answer before any heavy import
    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per remote request
    for note in no_effect_notes(args):
        logging.getLogger("app").warning(note)
    try:
        if not args.engine_url:
            check_model(args.model, args.revision, args.hf_token)
        serve(args)
    except StartupError as exc:
        if args.debug:
            raise
        sys.exit(f"error: {exc}")


def serve(args) -> None:
    """Load the engine (or connect to the remote servers), start the driver, serve until
    Ctrl-C."""
    import uvicorn

    from engine.cpu.openmp import lower_priority
    from playground.cli import startup
    from playground.cli.stats_log import start_stats_log
    from playground.server.frontend import ReadyServer

    config = startup.engine_config(args)
    engine, lanes, connections, serving = startup.open_engine(args, config)
    driver = startup.start_driver(args, engine, lanes, config, startup.public_limits(args))
    stats = None if args.disable_log_stats or connections else start_stats_log(driver)
    seat = control_seat(args)
    seat.on_handover = driver.resume  # a pause ends when its holder's seat does
    app = create_app(
        driver,
        args.served_model_name,
        args.api_key,
        api=not connections,
        seat=seat,
        stream_interval=args.stream_interval,
        frontend=Frontend.from_args(args),
    )
    host, port = resolve_host_port(args)
    uv_config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=args.uvicorn_log_level,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        **proxy_trust(args),
    )
    # After the driver thread has started (it keeps nice 0): the event loop and the threads it
    # starts from now on (Gradio's callbacks) may step aside for the engine (engine/cpu/openmp.py).
    lower_priority(args.serving_nice)
    # What startup made (torch, transformers, gradio, the model, the page) lives to the end:
    # out of the collector's full passes, which would scan it every time and hold the GIL
    # from the driver thread that long (vLLM freezes its startup heap the same way)
    gc.collect()
    gc.freeze()
    server = ReadyServer(uv_config, _banner(host, port, serving, seat), T_START)
    try:
        server.run()  # shuts down gracefully on Ctrl-C / SIGTERM
    except KeyboardInterrupt:  # uvicorn re-raises the signal once it has shut down
        pass
    finally:
        if stats is not None:
            stats.set()
        driver.stop()
        for connection in connections:
            connection.close()
        print("Playground stopped.", flush=True)


def create_app(
    driver,
    served_model_names: list[str] | None = None,
    api_keys: list[str] | None = None,
    api: bool = True,
    seat: Seat | None = None,
    stream_interval: int = 1,
    frontend: Frontend = Frontend(),
):
    """The server: a FastAPI app with the board at "/", GET /health; add more routes to it
    before serving. api=False (a board over a remote server): no /v1 routes and no /metrics
    of its own; clients talk to that server directly. `seat`: who drives the board (default:
    anyone). `stream_interval`: new tokens per streamed API chunk (vLLM's --stream-interval).
    `frontend`: vllm serve's settings of the HTTP server."""
    import gradio as gr
    from fastapi import FastAPI

    from playground.access.public import is_public
    from playground.access.seat_pass import SeatPass
    from playground.server.api import refuse_other_methods, register_api
    from playground.server.board_stream import register_board_stream
    from playground.server.frontend import add_frontend
    from playground.server.health import add_health_routes
    from playground.server.options import ServingOptions
    from playground.ui import build_ui, load_asset

    docs = {} if frontend.docs else {"openapi_url": None, "docs_url": None, "redoc_url": None}
    app = FastAPI(
        title="Continuous batching playground",
        summary="OpenAI-compatible API of the shared engine the board shows",
        **docs,
    )
    app.root_path = frontend.root_path  # as vLLM sets it (FastAPI's argument is deprecated)
    add_frontend(app, frontend)
    if api:  # /v1 (OpenAI-compatible), /health and /metrics, before the mount
        keep_alive = frontend.sse_keep_alive_interval
        if keep_alive is None:  # vllm serve's default; a public server keeps its streams alive
            keep_alive = ServingOptions.defaults(public=is_public(frontend.public))
            keep_alive = keep_alive.sse_keep_alive_interval
        register_api(
            app,
            driver,
            model_name=served_model_names,
            api_keys=api_keys or (),
            stream_interval=stream_interval,
            sse_keep_alive_interval=keep_alive,
            strict_request_fields=frontend.strict_request_fields,
            generation_config=frontend.generation_config,
            max_logprobs=frontend.max_logprobs,
        )
        refuse_other_methods(app)
    else:  # the API's /health comes with its routes
        add_health_routes(app, lambda: driver)
    # every viewer's live board; a public server caps the streams of one client address
    seat_pass = SeatPass()  # the seat holder's full-rate stream: its tick's token
    register_board_stream(app, driver.state, driver.stuck_for, is_public(frontend.public),
                          seat_tokens=seat_pass.tokens)  # fmt: skip
    demo = build_ui(driver, seat, seat_pass)
    theme = gr.themes.Soft(primary_hue="indigo", neutral_hue="slate")
    css = load_asset("style.css")
    return gr.mount_gradio_app(app, demo, path="/", css=css, theme=theme, footer_links=[])


def control_seat(args) -> Seat:
    """Who drives the board: --controls (default: locked if a presenter key is given, seat on
    a Space, else open) and the seat's times."""
    default = "locked" if args.presenter_key else "seat" if os.environ.get("SPACE_ID") else "open"
    mode = ControlMode(args.controls or default)
    key = args.presenter_key
    if mode is ControlMode.LOCKED and not key:
        import secrets

        key = secrets.token_urlsafe(12)
    return Seat(mode, SeatPolicy(term_s=args.seat_term, idle_s=args.seat_idle), key)


def resolve_host_port(args) -> tuple[str, int]:
    host = args.host or ("0.0.0.0" if os.environ.get("SPACE_ID") else "127.0.0.1")
    env_port = os.environ.get("PORT") or os.environ.get("GRADIO_SERVER_PORT")
    return host, args.port or int(env_port or DEFAULT_PORT)


def proxy_trust(args) -> dict:
    """uvicorn's settings for X-Forwarded-For: trusted only from --forwarded-allow-ips, or from
    anyone on a Space (whose proxy is the only way in). Untrusted, every client behind a proxy
    would be one client: one in-flight budget, one card."""
    ips = args.forwarded_allow_ips or ("*" if os.environ.get("SPACE_ID") else None)
    return {"proxy_headers": ips is not None, "forwarded_allow_ips": ips}


def _banner(host: str, port: int, serving: str, seat: Seat) -> str:
    url = f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"
    banner = f"Playground ready at {url}  ({serving}; Ctrl-C stops)"
    if seat.mode is ControlMode.LOCKED:
        banner += (
            f"\nPresenter (controls locked to it): {url}/?{PRESENTER_PARAM}={seat.presenter_key}"
        )
    return banner


if __name__ == "__main__":
    main()
