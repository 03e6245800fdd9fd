"""The engine's C library: built once per source and CPU, cached, and a clear reason when not;
the AVX2 build passes the kernel tests wherever the suite runs."""

import shutil
from pathlib import Path

import pytest

from engine.cpu import native_build
from tests.engine import avx2_build

HERE = Path(__file__).resolve().parent


def test_the_build_is_cached_per_source_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv(native_build.CACHE_ENV_VAR, str(tmp_path))
    build = native_build._build
    native_build.build_and_load()
    (built,) = tmp_path.glob("cb_kernels-*.so")
    monkeypatch.setattr(native_build, "_build", lambda *a: pytest.fail("rebuilt a cached library"))
    native_build.build_and_load()
    monkeypatch.setattr(native_build, "_build", build)
    csrc = tmp_path / "src"  # a source changed: a new build
    shutil.copytree(native_build.CSRC, csrc)
    (csrc / "paged_decode.c").write_text((csrc / "paged_decode.c").read_text() + "\n/* x */\n")
    monkeypatch.setattr(native_build, "CSRC", csrc)
    native_build.build_and_load()
    assert len(list(tmp_path.glob("cb_kernels-*.so"))) == 2, "a changed source reused a build"
    assert not list(tmp_path.glob(".*")), "a scratch file was left behind"
    assert built.exists()


def test_no_compiler_or_a_failing_build_is_a_clear_reason(tmp_path, monkeypatch):
    monkeypatch.setenv(native_build.CACHE_ENV_VAR, str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(native_build.KernelUnavailable, match="no working C compiler"):
        native_build.build_and_load()
    failing = tmp_path / "failing-cc"
    failing.write_text(
        '#!/bin/sh\n[ "$1" = --version ] && exit 0\necho "error: no vectors" >&2\nexit 1\n'
    )
    failing.chmod(0o755)
    monkeypatch.setenv("CC", str(failing))
    with pytest.raises(native_build.KernelUnavailable, match="could not build.*no vectors"):
        native_build.build_and_load()
    assert not list(tmp_path.glob("*.so")) and not list(tmp_path.glob(".*"))


def test_the_library_shares_torchs_openmp_runtime():
    """One libgomp in the process: the library's parallel regions run on torch's team, not
    on a second pool of threads competing for the same cores."""
    native_build.library()
    with open("/proc/self/maps") as maps:
        runtimes = {line.split()[-1] for line in maps if "libgomp" in line or "libomp" in line}
    assert len(runtimes) == 1, runtimes


def test_the_avx2_build_passes_the_panel_and_paged_kernel_tests(tmp_path):
    """The 256-bit panels and kernels that AVX2-only CPUs get (there a bfloat16 pool is widened
    to float32: no vdpbf16ps), built here and run through the panel tests of test_linear.py and
    the kernel tests of test_paged_kernel.py."""
    tests = ("panels_equal_f_linear or sum_as_the_float32_panels or float32_panels_take_one_row"
             " or kernel_equals or reads_only")  # fmt: skip
    files = [str(HERE / "test_linear.py"), str(HERE / "test_paged_kernel.py")]
    assert avx2_build.run_tests(tmp_path, files, tests).panel_gemm_width() == 16
