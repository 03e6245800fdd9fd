"""vLLM's `--config FILE`: a YAML file whose keys are flag names (`max-num-seqs: 8`).

Read as vLLM reads it (vllm/utils/argparse_utils.py, `load_config_file`): `key: value` becomes
`--key value`, `key: true` becomes `--key`, `key: false` `--no-key` where that flag exists, a
list `--key a b`. The file's flags go before the command line's, so the command line wins.
"""

import argparse


def expand_config(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`argv` with `--config FILE` (or `--config=FILE`) replaced by the file's flags in front."""
    at = [i for i, arg in enumerate(argv) if arg == "--config" or arg.startswith("--config=")]
    if not at:
        return argv
    if len(at) > 1:
        parser.error("--config: given more than once")
    i = at[0]
    if argv[i] == "--config":
        if i + 1 >= len(argv):
            parser.error("--config: expected a YAML file")
        path, rest = argv[i + 1], argv[:i] + argv[i + 2 :]
    else:
        path, rest = argv[i].partition("=")[2], argv[:i] + argv[i + 1 :]
    return _flags(parser, path) + rest


def _flags(parser: argparse.ArgumentParser, path: str) -> list[str]:
    import yaml  # only when a config file is given

    if not path.endswith((".yaml", ".yml")):
        parser.error(f"--config: a .yaml or .yml file, got {path!r}")
    try:
        with open(path) as f:
            config = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as exc:
        parser.error(f"--config: cannot read {path!r}: {exc}")
    if not isinstance(config, dict):
        parser.error(f"--config: {path!r} must hold `flag-name: value` lines")
    flags = []
    for key, value in config.items():
        if isinstance(value, bool):
            if value:
                flags.append(f"--{key}")
            elif f"--no-{key}" in parser._option_string_actions:
                flags.append(f"--no-{key}")
        elif isinstance(value, list):
            if value:
                flags += [f"--{key}", *map(str, value)]
        else:
            flags += [f"--{key}", str(value)]
    return flags
