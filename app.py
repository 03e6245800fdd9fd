"""The playground's entry point: args -> load engine -> driver -> board (+ routes) -> serve.

    python app.py [--model default|DIR|HUB_ID] [--device auto|cpu|cuda] [--port 7860] ...

The EngineConfig names are flags (dashed), and so are the public limits of the board and the
API (PublicLimits: --limit-prompt-tokens, --limit-max-tokens, ...). `create_app(driver)`
returns the FastAPI app with the Gradio board mounted at "/" and `GET /healthz`, so other
routes can join the same server.
"""

import argparse
import logging
import os
import time

T_START = time.monotonic()  # `make run` -> page answering is measured from here

import gradio as gr  # noqa: E402
import uvicorn  # noqa: E402
from fastapi import FastAPI  # noqa: E402

from engine import EngineConfig, LLMEngine  # noqa: E402
from engine.config import BATCHING, MODEL_IMPLS, SCHEDULING_POLICIES  # noqa: E402
from playground.api import register_api  # noqa: E402
from playground.driver import STUCK_AFTER_S, EngineDriver  # noqa: E402
from playground.limits import PublicLimits  # noqa: E402
from playground.scenarios import SCENARIOS  # noqa: E402
from playground.ui import build_ui, load_asset  # noqa: E402

DEFAULT_PORT = 7860
PLAYGROUND_KV_BLOCKS = 512  # 8192 tokens of 16: enough for the presets, and a readable block map


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Continuous batching playground (Gradio board).")
    p.add_argument("--model", default="default", help="'default' (SmolLM2-135M), a dir or hub id")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--dtype", default="auto", help="auto (CPU float32, CUDA bfloat16) | bfloat16")
    p.add_argument("--host", default=None, help="default 127.0.0.1; 0.0.0.0 on a Space")
    p.add_argument("--port", type=int, default=None, help="default $PORT or 7860")
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--num-kv-blocks", type=int, default=PLAYGROUND_KV_BLOCKS)
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
    p.add_argument("--no-chunked-prefill", action="store_true")
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument(
        "--torch-compile",
        action="store_true",
        help="compile the model's forward before serving: faster steps, minutes to start on a CPU",
    )
    p.add_argument("--max-waiting", type=int, default=None, help="waiting requests before 429")
    p.add_argument("--pace", default="max", help="'max' or steps per second (slow motion)")
    limits = PublicLimits()
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
        "--stuck-after", type=float, default=STUCK_AFTER_S, help="seconds before a step is stuck"
    )
    p.add_argument(
        "--scenario",
        choices=sorted(SCENARIOS),
        default=None,
        help="start this preset as soon as the model is loaded",
    )
    return p.parse_args(argv)


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
            "max_waiting",
        )
        if getattr(args, name) is not None
    }
    if args.no_chunked_prefill:
        overrides["enable_chunked_prefill"] = False
    if args.no_prefix_caching:
        overrides["enable_prefix_caching"] = False
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


def resolve_host_port(args: argparse.Namespace) -> tuple[str, int]:
    host = args.host or ("0.0.0.0" if os.environ.get("SPACE_ID") else "127.0.0.1")
    env_port = os.environ.get("PORT") or os.environ.get("GRADIO_SERVER_PORT")
    return host, args.port or int(env_port or DEFAULT_PORT)


def create_app(driver: EngineDriver) -> FastAPI:
    """FastAPI app: the board at "/", GET /healthz; add more routes to it before serving."""
    app = FastAPI(title="Continuous batching playground")

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

    register_api(app, driver)  # /v1 (OpenAI-compatible) and /metrics, before the mount
    demo = build_ui(driver)
    theme = gr.themes.Soft(primary_hue="indigo", neutral_hue="slate")
    css = load_asset("style.css")
    return gr.mount_gradio_app(app, demo, path="/", css=css, theme=theme, footer_links=[])


def main(argv=None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    args = parse_args(argv)
    config = engine_config(args)  # validated before the slow load
    limits = public_limits(args)
    host, port = resolve_host_port(args)
    engine = LLMEngine.from_pretrained(
        args.model, device=args.device, dtype=args.dtype, **_fields(config)
    )
    driver = EngineDriver(
        engine, pace=args.pace, base_config=config, limits=limits, stuck_after_s=args.stuck_after
    )
    if args.scenario:
        SCENARIOS[args.scenario].start(driver)
    server = _Server(uvicorn.Config(create_app(driver), host=host, port=port, log_level="warning"))
    server.banner = (
        f"Playground ready at http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"
        f"  (model {args.model!r}; Ctrl-C stops)"
    )
    try:
        server.run()  # shuts down gracefully on Ctrl-C / SIGTERM
    except KeyboardInterrupt:  # uvicorn re-raises the signal once it has shut down
        pass
    finally:
        driver.stop()
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
