"""What app.py does once the flags are read: the engine (or the remote servers), the driver,
and the HTTP server's vLLM settings. Imported only after parsing: it loads torch, the engine
and FastAPI."""

import argparse
import dataclasses
import logging
from dataclasses import replace

from engine import EngineConfig, LLMEngine
from playground.access.limits import PublicLimits
from playground.access.public import is_public
from playground.cli.engine_flags import engine_overrides
from playground.cli.loading import chat_template, check_kv_cache_dtype, hub_options
from playground.cli.model_source import StartupError
from playground.driver import EngineDriver
from playground.remote.connection import Connection
from playground.remote.engine import RemoteEngine, remote_lanes
from playground.workload.scenarios import SCENARIOS

log = logging.getLogger("app")
LIMIT_FLAGS = {  # PublicLimits' field -> its flag's dest
    "max_prompt_tokens": "limit_prompt_tokens",
    "max_tokens": "limit_max_tokens",
    "max_n": "limit_n",
    "max_in_flight": "limit_in_flight",
    "max_num_queued_reqs": "max_num_queued_reqs",
}


def engine_config(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(**engine_overrides(args, EngineConfig))


def public_limits(args: argparse.Namespace) -> PublicLimits:
    """The flags given; PublicLimits' defaults for the others, a public server's where this is
    one (--request-timeout 0: none)."""
    given = {field: getattr(args, dest) for field, dest in LIMIT_FLAGS.items()}
    limits = {field: value for field, value in given.items() if value is not None}
    if args.request_timeout is not None:
        limits["default_timeout_s"] = args.request_timeout or None
    return replace(PublicLimits.defaults(public=is_public(args.public)), **limits)


def open_engine(args: argparse.Namespace, config: EngineConfig):
    """(engine, lanes, connections, what it serves): the model loaded in process, or a
    RemoteEngine over the --engine-url servers (lanes for the driver, None in process)."""
    if args.scenario and args.scenario not in SCENARIOS:
        raise StartupError(f"--scenario {args.scenario!r}: one of {', '.join(sorted(SCENARIOS))}")
    if args.engine_url:
        urls = args.engine_url  # normalized by parse_args
        connections = [
            Connection(
                url,
                args.engine_api_key,
                args.engine_model,
                **_given(max_concurrency=args.engine_concurrency),
            )
            for url in urls
        ]
        engine = RemoteEngine(connections[0], config)
        return engine, remote_lanes(connections), connections, " and ".join(urls)
    return load_engine(args, config), None, [], f"model {args.model!r}"


def load_engine(args: argparse.Namespace, config: EngineConfig) -> LLMEngine:
    """The model with vLLM's loading flags, then the engine (seeded by --seed); the load runs
    on a short-lived thread (LLMEngine.from_pretrained)."""
    template = chat_template(args.chat_template)  # a bad one stops before the slow load
    engine = LLMEngine.from_pretrained(
        args.model,
        device=args.device,
        dtype=args.dtype,
        seed=args.seed,
        load_options={"tokenizer": args.tokenizer, "hub": hub_options(args)},
        **dataclasses.asdict(config),
    )
    check_kv_cache_dtype(args.kv_cache_dtype, engine.model.dtype)
    if template is not None:
        engine.tokenizer.chat_template = template
    return engine


def start_driver(args, engine, lanes, config: EngineConfig, limits: PublicLimits):
    """The driver thread over `engine`; the engines a reset builds keep --seed."""
    driver = EngineDriver(
        engine,
        pace=args.pace,
        engine_factory=seeded_factory(engine, args.seed),
        base_config=config,
        limits=limits,
        lanes=lanes,
        max_pause_s=args.max_pause,
        **_given(stuck_after_s=args.stuck_after),
    )
    if args.scenario:
        SCENARIOS[args.scenario].start(driver)
    return driver


def seeded_factory(engine, seed: int | None):
    """The driver's engine factory: engines over `engine`'s model, each seeded with `seed`."""

    def factory(cfg: EngineConfig) -> LLMEngine:
        return LLMEngine(engine.model, engine.tokenizer, cfg, seed=seed)

    return factory


def _given(**kwargs) -> dict:
    """The keyword arguments that are not None (the callee's defaults for the others)."""
    return {k: v for k, v in kwargs.items() if v is not None}
