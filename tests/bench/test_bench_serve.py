"""vLLM's own serving benchmark client (`vllm bench serve`, from .venv-vllm) at concurrency 32
against `python app.py` with its defaults: every request succeeds. Before the defaults
followed `vllm serve` (vllm/entrypoints/launchers/cli_args.py: no keep-alive comments unless
asked; no per-client in-flight limit), 60 of 64 such requests failed with 429.

Marked `vllm`: deselected where .venv-vllm is missing (tests/conftest.py). It starts the app
with the real default model, so it takes minutes on a busy 2-core machine.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.e2e, pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1800)]


def test_vllm_bench_serve_at_concurrency_32_fails_nothing(tmp_path):
    command = [sys.executable, "bench/bench_serve.py", "--systems", "engine", "--datasets",
               "random", "--concurrency", "32", "--num-prompts", "32", "--input-len", "64",
               "--output-len", "16", "--log-dir", str(tmp_path)]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1700)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads((tmp_path / "engine" / "random-c32.json").read_text())
    assert (result["completed"], result["failed"]) == (32, 0), run.stdout[-3000:]
    assert result["max_concurrency"] == 32
    assert result["total_output_tokens"] == 32 * 16  # --ignore-eos: every token came
