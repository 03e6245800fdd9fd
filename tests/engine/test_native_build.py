"""The engine's C library: built once per source and CPU, cached, and a clear reason when not."""

import shutil

import pytest

from engine.cpu import native_build


def test_the_build_is_cached_per_source_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv(native_build.CACHE_ENV_VAR, str(tmp_path))
    build = native_build._build
    native_build.build_and_load()
    (built,) = tmp_path.glob("cb_kernels-*.so")
    monkeypatch.setattr(native_build, "_build", lambda *a: pytest.fail("rebuilt a cached library"))
    native_build.build_and_load()
    monkeypatch.setattr(native_build, "_build", build)
    for changed in ("fused_ops.c", "paged_decode.c"):  # any source changed: a new build
        csrc = tmp_path / f"src-{changed}"
        shutil.copytree(native_build.CSRC, csrc)
        (csrc / changed).write_text((csrc / changed).read_text() + "\n/* changed */\n")
        monkeypatch.setattr(native_build, "CSRC", csrc)
        native_build.build_and_load()
    assert len(list(tmp_path.glob("cb_kernels-*.so"))) == 3, "a changed source reused a build"
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
