"""EngineConfig's fields as flags, with vLLM's names.

One flag per field, dashed (`max_num_seqs` -> `--max-num-seqs`), its help and choices from the
field's metadata (engine/config.py), its default shown. A boolean `enable_x` field takes vLLM's
`--enable-x` / `--no-enable-x` and the shorter `--no-x`. A flag left out leaves the field at
EngineConfig's default, except where the playground sets its own (PLAYGROUND_DEFAULTS).
"""

import argparse
import types
from dataclasses import MISSING, fields

from playground.cli.vllm_flags import human_readable_int, human_readable_int_or_auto

PLAYGROUND_KV_BLOCKS = 512  # 8192 tokens of 16: enough for the presets, and a readable block map
# the waiting queue: no limit, as `vllm serve` (its admission limit is --max-num-queued-reqs)
PLAYGROUND_DEFAULTS = {"num_kv_blocks": PLAYGROUND_KV_BLOCKS, "max_waiting": None}
ALIASES = {  # `vllm serve`'s name of a field, where it differs from the field's
    "num_kv_blocks": "--num-gpu-blocks-override",
}
# vLLM takes 4k (4000) and 4K (4096) for these (vllm/engine/arg_utils.py), and -1 or auto for
# the model's own window
VALUE_TYPES = {"max_model_len": human_readable_int_or_auto,
               "max_num_batched_tokens": human_readable_int}  # fmt: skip


def add_engine_flags(parser: argparse.ArgumentParser, config_cls: type) -> None:
    """One flag per field of `config_cls` (EngineConfig), in a group of their own."""
    group = parser.add_argument_group("engine (EngineConfig: the scheduler, KV cache, runner)")
    for f in fields(config_cls):
        flag = "--" + f.name.replace("_", "-")
        default = PLAYGROUND_DEFAULTS.get(f.name, f.default)
        assert default is not MISSING, f"EngineConfig.{f.name} needs a default"
        help_text = f"{f.metadata['help']} (default: {default})"
        if f.type is bool:
            _add_switch(group, f.name, flag, help_text)
            continue
        names = [flag, *([ALIASES[f.name]] if f.name in ALIASES else [])]
        group.add_argument(
            *names,
            dest=f.name,
            type=VALUE_TYPES.get(f.name, _value_type(f)),
            choices=f.metadata.get("choices"),
            default=None,
            metavar=None if f.metadata.get("choices") else f.name.split("_")[-1].upper(),
            help=help_text,
        )


def _add_switch(group, name: str, flag: str, help_text: str) -> None:
    """--x / --no-x; an `enable_` field also --no-<rest> (the playground's older spelling)."""
    group.add_argument(
        flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text
    )
    if name.startswith("enable_"):
        short = "--no-" + name.removeprefix("enable_").replace("_", "-")
        group.add_argument(short, dest=name, action="store_false", help=f"= --no-{flag[2:]}")


def _value_type(f) -> type:
    """int for `int` and `int | None` fields, str for the choices; anything else is a field
    this module does not know how to read yet."""
    if f.metadata.get("choices"):
        return str
    if f.type is int or (isinstance(f.type, types.UnionType) and int in f.type.__args__):
        return int
    raise TypeError(f"EngineConfig.{f.name}: no flag type for {f.type!r}")


def engine_overrides(args: argparse.Namespace, config_cls: type) -> dict:
    """The fields the command line sets: flags given, and the playground's own defaults."""
    given = {f.name: getattr(args, f.name) for f in fields(config_cls)}
    return {
        name: value if value is not None else PLAYGROUND_DEFAULTS[name]
        for name, value in given.items()
        if value is not None or name in PLAYGROUND_DEFAULTS
    }
