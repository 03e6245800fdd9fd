"""The command line of `app.py`: parsed before anything heavy is imported.

`parse_args` answers `--help` and a mistyped flag in a fraction of a second: it reads
EngineConfig's fields from engine/config.py without loading torch (light.py) and imports
nothing of gradio, FastAPI or the engine. Its flags: the model (as `vllm serve` takes it),
EngineConfig's fields (engine_flags.py), `vllm serve`'s own (vllm_flags.py), and the
playground's (board_flags.py). docs/cli.md lists them.
"""

import argparse
import difflib
import functools
import json
import sys
from pathlib import Path

from playground.cli.board_flags import (
    add_board_flags,
    add_limit_flags,
    add_remote_flags,
    add_server_flags,
)
from playground.cli.config_file import expand_config
from playground.cli.engine_flags import add_engine_flags, engine_overrides
from playground.cli.light import import_leaf
from playground.cli.vllm_flags import add_vllm_flags

MAX_ENGINE_URLS = 2  # compare mode: two servers side by side


class Parser(argparse.ArgumentParser):
    """argparse's parser that names the closest flag when one is mistyped."""

    def parse_args(self, args=None, namespace=None):
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            flags = list(self._option_string_actions)
            hints = [
                f"{arg} (did you mean {close[0]}?)" if close else arg
                for arg in unknown
                for close in [difflib.get_close_matches(arg.split("=")[0], flags, n=1)]
            ]
            self.error(f"unrecognized arguments: {' '.join(hints)}")
        return parsed


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="app.py",
        usage="%(prog)s [MODEL] [--flag value ...]   (%(prog)s --help lists the flags)",
        description="Continuous batching playground: the board, and an OpenAI-compatible API "
        "of the engine it shows. vllm serve's flags work too (docs/cli.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # a mistyped flag is an error, never another flag
    )
    p.add_argument(
        "model_tag", nargs="?", metavar="MODEL", help="the model, as vllm serve takes it"
    )
    p.add_argument("--model", default=None, help="'default' (SmolLM2-135M), a dir or a hub id")
    p.add_argument("--config", metavar="FILE", help="a YAML file of flags (vllm serve's --config)")
    p.add_argument("--debug", action="store_true", help="tracebacks for start-up errors")
    add_server_flags(p)
    add_board_flags(p)
    add_limit_flags(p)
    add_engine_flags(p, _config_module().EngineConfig)
    add_vllm_flags(p)
    add_remote_flags(p)
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The flags of `argv` (default: the process's), checked; exits with a usage message on a
    bad one, naming it, as argparse does."""
    p = build_parser()
    argv = expand_config(p, list(sys.argv[1:] if argv is None else argv))
    args = p.parse_args(argv)
    if args.model_tag and args.model and args.model_tag != args.model:
        p.error(f"the model is given twice: {args.model_tag!r} and --model {args.model!r}")
    args.model = args.model_tag or args.model or "default"
    _check_engine_urls(p, args)
    _check_engine_config(p, args)
    _check_vllm_values(p, args)
    return args


def _check_engine_config(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The flags' EngineConfig, built once now so that a bad value stops here, named by its
    flag, before the slow imports and the model load."""
    module = _config_module()
    try:
        module.EngineConfig(**engine_overrides(args, module.EngineConfig))
    except module.FieldError as exc:
        p.error(f"--{exc.field.replace('_', '-')}: {exc}")
    except ValueError as exc:
        p.error(str(exc))


def _check_engine_urls(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--engine-url: at most two, each as http://HOST:PORT (what a user types, normalized)."""
    urls = args.engine_url or []
    if len(urls) > MAX_ENGINE_URLS:
        p.error(f"--engine-url: at most {MAX_ENGINE_URLS} servers (compare mode)")
    if urls:  # the remote client's module, only for a remote board: it loads httpx
        from playground.remote.connection import normalize_url

        try:
            urls = [normalize_url(u) for u in urls]
        except ValueError as exc:
            p.error(f"--{exc}")
    args.engine_url = urls


def _check_vllm_values(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """vLLM's flags whose values this engine takes only in part."""
    most = import_leaf("engine.sampling_params").MAX_LOGPROBS
    if args.max_logprobs is not None and not -1 <= args.max_logprobs <= most:
        p.error(
            f"--max-logprobs: this engine returns at most {most} per token; 0 to {most}, or "
            f"-1 (vLLM's no cap: {most} here), got {args.max_logprobs}"
        )
    folder = args.generation_config
    if folder in ("auto", "vllm"):
        return
    path = Path(folder) / "generation_config.json"
    if not path.is_file():
        p.error(
            f"--generation-config: 'auto', 'vllm' or a folder with generation_config.json, "
            f"got {folder!r}"
        )
    try:
        json.loads(path.read_text())
    except (ValueError, OSError) as exc:
        p.error(f"--generation-config: {path} is not a JSON file: {exc}")


@functools.cache
def _config_module():
    """engine/config.py, read without torch (light.py)."""
    return import_leaf("engine.config")
