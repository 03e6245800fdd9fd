"""The command line (playground/cli/): fast to answer, flags generated from EngineConfig, and
`vllm serve`'s flags taken as vLLM takes them."""

import argparse
import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine import EngineConfig
from playground.cli import build_parser, parse_args
from playground.cli.engine_flags import PLAYGROUND_DEFAULTS
from playground.cli.startup import engine_config, public_limits
from playground.cli.vllm_flags import GPU_ONLY, human_readable_int, no_effect_notes
from playground.server.options import ServingOptions

ROOT = Path(__file__).resolve().parents[1]


def run_app(*flags: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "app.py", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_help_and_a_bad_flag_import_nothing_heavy():
    """--help and a mistyped flag are answered from the flags alone: neither torch, gradio,
    FastAPI nor the engine's package is imported (they take seconds)."""
    probe = (
        "import sys, app\n"
        "try:\n"
        "    app.main(sys.argv[1:])\n"
        "except SystemExit as exit:\n"
        "    heavy = {'torch', 'gradio', 'fastapi', 'transformers', 'engine', 'uvicorn'}\n"
        "    print(exit.code, sorted(heavy & set(sys.modules)))\n"
    )
    for flags, code in ((["--help"], 0), (["--max-num-seq", "4"], 2)):
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-c", probe, *flags], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        elapsed = time.monotonic() - started
        assert done.stdout.splitlines()[-1] == f"{code} []", (flags, done.stdout, done.stderr)
        assert elapsed < 10, elapsed  # a loose bound for a loaded machine; typically < 1 s
    assert "--max-num-seq (did you mean --max-num-seqs?)" in done.stderr  # no abbreviations
    assert len(done.stderr.strip().splitlines()) == 2  # the short usage, and the error


def test_every_engine_config_field_is_a_flag_with_its_help_and_default(monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # no wrapping: each help on one line
    help_text = " ".join(build_parser().format_help().split())
    for f in dataclasses.fields(EngineConfig):
        flag = "--" + f.name.replace("_", "-")
        default = PLAYGROUND_DEFAULTS.get(f.name, f.default)
        assert flag in help_text, flag
        assert f"{' '.join(f.metadata['help'].split())} (default: {default})" in help_text
        for choice in f.metadata.get("choices") or ():
            assert choice in help_text
    args = parse_args(["--max-num-seqs", "4", "--block-size", "8", "--model-impl", "transformers",
                       "--kv-backend", "hf_cache", "--no-enable-chunked-prefill"])  # fmt: skip
    cfg = engine_config(args)
    assert (cfg.max_num_seqs, cfg.block_size, cfg.model_impl) == (4, 8, "transformers")
    assert cfg.kv_backend == "hf_cache" and cfg.enable_chunked_prefill is False
    assert cfg.num_kv_blocks == PLAYGROUND_DEFAULTS["num_kv_blocks"]
    assert engine_config(parse_args([])) == EngineConfig(**PLAYGROUND_DEFAULTS)


def test_a_bad_engine_value_names_its_flag(capsys):
    for flags, named in ((["--max-num-seqs", "0"], "--max-num-seqs: max_num_seqs"),
                         (["--batching", "dynamic"], "--batching: invalid choice"),
                         (["--max-num-seqs", "64", "--max-num-batched-tokens", "32"],
                          "max_num_batched_tokens (32) must be >= max_num_seqs (64)")):  # fmt: skip
        with pytest.raises(SystemExit) as exit:
            parse_args(flags)
        assert exit.value.code == 2 and named in capsys.readouterr().err


def test_max_model_len_takes_vllms_suffixes(capsys):
    """vLLM reads --max-model-len with `human_readable_int` (vllm/utils/argparse_utils.py):
    lower-case k/m/g/t are powers of 1000 and may have decimals, upper-case K/M/G/T powers of
    1024 and may not."""
    cases = {"2048": 2048, "4k": 4000, "4K": 4096, "25.6k": 25600, "1m": 10**6, "2M": 2 * 2**20}
    for text, value in cases.items():
        assert human_readable_int(text) == value
    assert parse_args(["--max-model-len", "4K"]).max_model_len == 4096
    with pytest.raises(argparse.ArgumentTypeError, match="did you mean 1.5k"):
        human_readable_int("1.5K")
    with pytest.raises(SystemExit):
        parse_args(["--max-model-len", "4q"])
    assert "--max-model-len" in capsys.readouterr().err


def test_max_model_len_auto_and_human_readable_token_budget():
    """vllm/engine/arg_utils.py: --max-model-len takes human_readable_int_or_auto (-1 or auto:
    the model's own window, fit to the KV cache, vllm/config/model.py), which is EngineConfig's
    None here; --max-num-batched-tokens takes human_readable_int (the other flags of its
    human_readable_int_args do not exist here)."""
    for value in ("auto", "AUTO", "-1"):
        args = parse_args(["--max-model-len", value])
        assert args.max_model_len is None and engine_config(args).max_model_len is None
    args = parse_args(["--max-num-batched-tokens", "2k", "--max-num-seqs", "8"])
    assert engine_config(args).max_num_batched_tokens == 2000
    assert parse_args(["--max-num-batched-tokens", "1K"]).max_num_batched_tokens == 1024


def test_vllm_serve_flags_are_accepted():
    """Every `vllm serve` flag of issue 63's list parses (names from vllm/engine/arg_utils.py
    and vllm/entrypoints/launchers/cli_args.py), with the meaning vLLM gives it."""
    args = parse_args(["some/model", "--seed", "7", "--tokenizer", "tok/dir", "--revision",
                       "v2", "--trust-remote-code", "--chat-template", "t.jinja",
                       "--generation-config", "vllm", "--max-logprobs", "5",
                       "--max-num-queued-reqs", "9", "--kv-cache-dtype", "auto", "--enforce-eager",
                       "--disable-log-stats", "--enable-log-requests", "--uvicorn-log-level",
                       "debug", "--root-path", "/proxy", "--allowed-origins", '["http://a"]',
                       "--sse-keep-alive-interval", "3", "--disable-fastapi-docs",
                       "--load-format", "safetensors", "--download-dir", "/tmp/dl",
                       "--hf-token", "hf_x", "--gpu-memory-utilization", "0.9",
                       "--tensor-parallel-size", "1", "--max-model-len", "1k"])  # fmt: skip
    assert (args.model, args.seed, args.tokenizer, args.revision) == (
        "some/model",
        7,
        "tok/dir",
        "v2",
    )
    assert args.trust_remote_code and args.disable_log_stats and args.enable_log_requests
    assert args.allowed_origins == ["http://a"] and args.sse_keep_alive_interval == 3
    assert (args.root_path, args.uvicorn_log_level, args.max_logprobs) == ("/proxy", "debug", 5)
    assert public_limits(args).max_num_queued_reqs == 9  # vLLM's admission, at the door
    assert engine_config(args).max_waiting is None  # the engine's queue: no limit, as vLLM
    assert engine_config(args).max_model_len == 1000


def test_vllm_values_this_engine_takes_in_part(capsys, tmp_path):
    """--max-logprobs (vllm/config/model.py: default 20, -1 = no cap) stops at the engine's
    cap of 20, -1 included (with one note at start); --generation-config (same file) is
    'auto', 'vllm' or a folder holding generation_config.json, read as JSON."""
    (tmp_path / "generation_config.json").write_text("{}")
    assert parse_args(["--generation-config", str(tmp_path)]).generation_config == str(tmp_path)
    assert parse_args(["--max-logprobs", "20"]).max_logprobs == 20
    no_cap = parse_args(["--max-logprobs", "-1"])  # vLLM's no cap: the engine's, said once
    assert ServingOptions(max_logprobs=no_cap.max_logprobs).max_logprobs == 20
    assert [n for n in no_effect_notes(no_cap) if "--max-logprobs -1" in n and "20" in n]
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "generation_config.json").write_text("{temperature: 0")
    for flags, says in (
        (["--max-logprobs", "-2"], "at most 20 per token"),
        (["--max-logprobs", "21"], "at most 20 per token"),
        (["--generation-config", "/no/such"], "generation_config.json"),
        (["--generation-config", str(broken)], "is not a JSON file"),
    ):
        with pytest.raises(SystemExit):
            parse_args(flags)
        assert says in capsys.readouterr().err


def test_gpu_only_flags_say_they_do_nothing_here():
    """One line per GPU-only flag given; a tensor-parallel size above 1 points to
    --engine-url (the board in front of a vLLM cluster)."""
    assert no_effect_notes(parse_args([])) == []
    notes = no_effect_notes(parse_args(["--enforce-eager", "-tp", "4", "--swap-space", "2"]))
    assert len(notes) == 3 and all("no effect" in n for n in notes)
    assert "--engine-url" in next(n for n in notes if n.startswith("--tensor-parallel-size"))
    for flag, (kwargs, _) in GPU_ONLY.items():  # each one parses alone
        value = [] if kwargs.get("action") == "store_true" else ["1"]
        assert len(no_effect_notes(parse_args([flag, *value]))) == 1, flag


def test_config_file_as_vllm_reads_it(tmp_path, capsys):
    """`--config FILE.yaml` (vllm/utils/argparse_utils.py, load_config_file): keys are flag
    names, true is the bare flag, false its --no- form, the command line wins."""
    config = tmp_path / "serve.yaml"
    config.write_text("max-num-seqs: 8\nenable-prefix-caching: false\ntrust-remote-code: true\n"
                      "served-model-name: [a, b]\nport: 9000\n")  # fmt: skip
    args = parse_args(["--config", str(config), "--port", "9100"])
    assert (args.max_num_seqs, args.enable_prefix_caching, args.port) == (8, False, 9100)
    assert args.trust_remote_code and args.served_model_name == ["a", "b"]
    assert parse_args([f"--config={config}"]).port == 9000
    (tmp_path / "serve.json").write_text("{}")
    for bad, says in ((["--config", str(tmp_path / "serve.json")], ".yaml or .yml"),
                      (["--config", str(tmp_path / "none.yaml")], "cannot read"),
                      (["--config"], "expected a YAML file")):  # fmt: skip
        with pytest.raises(SystemExit):
            parse_args(bad)
        assert says in capsys.readouterr().err


def test_bad_model_answers_in_one_line():
    """A missing folder, and a hub id that is neither cached nor reachable (offline here),
    stop with one line on stderr that names the model and says what to do; --debug shows the
    traceback."""
    missing = run_app("--model", "/nonexistent/model")
    assert missing.returncode != 0 and len(missing.stderr.strip().splitlines()) <= 3
    assert "'/nonexistent/model': no such folder" in missing.stderr
    offline = run_app("nobody-here/no-such-model", env={"HF_HUB_OFFLINE": "1"})
    lines = offline.stderr.strip().splitlines()
    assert offline.returncode != 0 and len(lines) <= 3, offline.stderr
    assert "'nobody-here/no-such-model' is not in the local cache" in lines[-1]
    debug = run_app("--model", "/nonexistent/model", "--debug")
    assert debug.returncode != 0 and "Traceback" in debug.stderr
