"""The engine's C library as gcc builds it on an AVX2-only CPU, tested on any x86 machine.

On an AVX-512 machine the library has 512-bit kernels; `run_tests` builds the 256-bit ones
(-mno-avx512f) into a cache directory of its own and runs tests of this suite against them in
a subprocess, so CI covers both whichever CPU it draws."""

import ctypes
import os
import subprocess
import sys
from pathlib import Path

from engine.cpu import native_build

SCRIPT = """
import sys, pytest
from engine.cpu import native_build
native_build.FLAGS += ("-mno-avx512f",)  # as gcc builds the library on an AVX2-only CPU
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[2:], "-k", sys.argv[1]]))
"""


def run_tests(cache_dir: Path, test_files: list[str], tests: str) -> ctypes.CDLL:
    """Runs the tests of `test_files` that `-k tests` selects on the AVX2 build (they must all
    pass), in one subprocess; returns that build, loaded."""
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, tests, *test_files],
        env={**os.environ, native_build.CACHE_ENV_VAR: str(cache_dir)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "failed" not in result.stdout
    (built,) = cache_dir.glob("cb_kernels-*.so")  # its own build, not this machine's
    return ctypes.CDLL(str(built))
