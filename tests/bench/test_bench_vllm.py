"""bench/bench_vllm.py: its table, its flags, and the engine's side of each part for real."""

import os
import subprocess
import sys
import time

import pytest

from bench import bench_vllm
from bench.peer_http import group_members, on_client_thread, stop, wait_for_group
from bench.peer_worker import group_cpu_s, wait_for_quiet
from engine.loader import _resolve_source


def result(part, system, round_=0, **values):
    """One round's run, as bench_vllm.main files it: a list per (part, dtype, system)."""
    return [{"part": part, "system": system, "round": round_, **values}]


def test_table_ratio_is_engine_speed_over_vllm_speed():
    results = {
        ("offline", "float32", "engine"): result("offline", "engine", tokens_per_s=300, ready_s=6),
        ("offline", "float32", "vllm"): result("offline", "vllm", tokens_per_s=200, ready_s=60),
        ("batch1", "float32", "engine"): result("batch1", "engine", decode_s_per_token=0.040),
        ("batch1", "float32", "vllm"): result("batch1", "vllm", decode_s_per_token=0.020),
    }
    rows = bench_vllm.table(results, ["float32"])
    assert rows[2:] == [
        "| offline, float32 (tok/s) | 200.0 | 300.0 | 1.50x |",
        "| batch-1 decode, float32 (ms/token) | 20.0 | 40.0 | 0.50x |",  # slower: under 1
        "| start to ready, in process, float32 (s) | 60.0 | 6.00 | 10.00x |",
    ]  # no HTTP rows: nothing measured


def test_table_marks_a_missing_side():
    results = {("http", "float32", "engine"): result("http", "engine", tokens_per_s=100.0)}
    (row,) = [r for r in bench_vllm.table(results, ["float32"]) if "openai" in r]
    assert row == "| HTTP, openai client, float32 (tok/s) | - | 100.0 | - |"


def test_cpu_rows_are_shown_without_a_ratio():
    results = {
        ("offline", "float32", "engine"): result("offline", "engine", cpu_s=38.0),
        ("http", "float32", "engine"): result("http", "engine", client_cpu_s=2.0),
        ("http", "float32", "vllm"): result("http", "vllm", server_cpu_s=40.0, client_cpu_s=1.5),
    }
    assert bench_vllm.table(results, ["float32"])[2:] == [
        "| offline, CPU taken, float32 (s) | - | 38.0 |  |",
        "| HTTP, the server's CPU, float32 (s) | 40.0 | - |  |",
        "| HTTP, the client's own CPU, float32 (s) | 1.50 | 2.00 |  |",
    ]


def test_cores_busy_counts_the_client_over_http(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    offline = {"part": "offline", "wall_s": 10.0, "cpu_s": 19.0}
    http = {"part": "http", "wall_s": 10.0, "server_cpu_s": 16.0, "client_cpu_s": 2.0}
    assert bench_vllm.cores_busy(offline) == pytest.approx(0.95)
    assert bench_vllm.cores_busy(http) == pytest.approx(0.90)


BURN = """import time
start = time.process_time()
while time.process_time() - start < 0.3:
    pass
print("burnt", flush=True)
time.sleep(60)
"""


def test_group_cpu_counts_every_process_of_the_group():
    child = f"subprocess.Popen([sys.executable, '-c', {BURN!r}])"
    leader = f"import subprocess, sys; {child}; exec({BURN!r})"
    proc = subprocess.Popen([sys.executable, "-c", leader], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        assert [proc.stdout.readline() for _ in range(2)] == ["burnt\n"] * 2  # both have burnt
        taken = group_cpu_s(proc.pid)
        assert 0.5 <= taken < 5.0  # 0.3 s each, plus the interpreters' start
        time.sleep(0.3)
        assert group_cpu_s(proc.pid) - taken < 0.1  # asleep now: CPU time, not wall time
    finally:
        stop(proc)
        proc.stdout.close()


def test_http_over_offline():
    results = {
        ("offline", "bfloat16", "engine"): result("offline", "engine", tokens_per_s=200.0),
        ("http", "bfloat16", "engine"): result("http", "engine", tokens_per_s=180.0),
        ("http", "bfloat16", "vllm"): result("http", "vllm", tokens_per_s=180.0),  # no offline
    }
    assert bench_vllm.http_over_offline(results, ["bfloat16"]) == [
        "engine HTTP / in process, bfloat16: 0.90x tok/s"
    ]


def engine_rounds(part, speeds):
    return [run for i, t in enumerate(speeds) for run in result(part, "engine", i, tokens_per_s=t)]


def test_rounds_give_medians_and_a_ratio_per_round():
    results = {  # a machine whose speed drifts between rounds
        ("offline", "float32", "engine"): engine_rounds("offline", [300.0, 200.0, 250.0]),
        ("http", "float32", "engine"): engine_rounds("http", [270.0, 200.0, 150.0]),
    }
    rows = bench_vllm.table(results, ["float32"])
    assert "| offline, float32 (tok/s) | - | 250.0 | - |" in rows  # the median
    assert "| HTTP, openai client, float32 (tok/s) | - | 200.0 | - |" in rows
    # each round's own pair (0.90, 1.00, 0.60), not median over median (0.80)
    assert bench_vllm.http_over_offline(results, ["float32"]) == [
        "engine HTTP / in process, float32: 0.90x tok/s (median of 3 rounds: 0.90, 1.00, 0.60)"
    ]


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--parts", "offline,gpu"),
        ("--dtypes", "float16"),
        ("--systems", ""),
        ("--stream-interval", "0"),
        ("--repeat", "0"),
    ],
)
def test_a_bad_choice_names_its_flag(monkeypatch, capsys, flag, value):
    monkeypatch.setattr(sys, "argv", ["bench_vllm.py", flag, value])
    with pytest.raises(SystemExit):
        bench_vllm.parse_args()
    assert flag in capsys.readouterr().err


def test_a_missing_vllm_venv_says_how_to_build_it(monkeypatch, capsys, tmp_path):
    missing = str(tmp_path / "bin" / "python")
    monkeypatch.setattr(sys, "argv", ["bench_vllm.py", "--vllm-python", missing])
    with pytest.raises(SystemExit):
        bench_vllm.parse_args()
    assert "make bench-vllm" in capsys.readouterr().err


def test_wait_for_quiet_gives_up_at_its_cap():
    assert wait_for_quiet(max_load=-1.0, cap_s=0.0) >= 0.0  # never quiet: returns at once


def _leader_with_a_child(child_s: float) -> subprocess.Popen:
    """A process, in a group of its own, that ends after 0.2 s and leaves a child that lives
    `child_s` (as a vLLM worker outlives its parent); returned once the leader has ended."""
    proc = subprocess.Popen(["sh", "-c", f"sleep {child_s} & sleep 0.2"], start_new_session=True)
    proc.wait()
    assert group_members(proc.pid)
    return proc


def test_stop_returns_once_the_whole_group_is_gone():
    proc = _leader_with_a_child(1.0)
    stop(proc)
    assert not group_members(proc.pid)


def test_a_child_that_will_not_end_is_killed_after_the_timeout():
    proc = _leader_with_a_child(600.0)
    start = time.monotonic()
    wait_for_group(proc.pid, timeout_s=0.5)
    assert not group_members(proc.pid) and time.monotonic() - start < 30


@pytest.fixture
def args(monkeypatch, tmp_path):
    argv = ["bench_vllm.py", "--systems", "engine", "--quick", "--max-load", "1000",
            "--batch1-max-tokens", "3", "--log-dir", str(tmp_path)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    parsed = bench_vllm.parse_args()
    parsed.model_dir = _resolve_source("default", None)
    return parsed


WORKLOAD = [([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 5), ([11, 12, 13, 14], 3)]


@pytest.mark.parametrize("name", sorted(bench_vllm.WORKLOADS))
def test_every_workload_fits_vllms_model_length(name):
    shape = bench_vllm.WORKLOADS[name]
    assert shape["prompt_len"][1] + shape["max_tokens"][1] <= bench_vllm.MAX_MODEL_LEN


def test_the_workload_flag_offers_every_workload_but_the_smoke_run(monkeypatch, capsys):
    argv = ["bench_vllm.py", "--systems", "engine", "--workload"]
    for name in sorted(set(bench_vllm.WORKLOADS) - {"quick"}):
        monkeypatch.setattr(sys, "argv", [*argv, name])
        assert bench_vllm.parse_args().workload == name
    monkeypatch.setattr(sys, "argv", [*argv, "quick"])
    with pytest.raises(SystemExit):
        bench_vllm.parse_args()
    assert "--workload" in capsys.readouterr().err


@pytest.mark.slow
def test_engine_in_process_parts_share_one_process(args):
    out = bench_vllm.run_system("engine", "float32", ["offline", "batch1"], WORKLOAD,
                                list(range(20, 40)), args)  # fmt: skip
    offline, batch1 = out["offline"], out["batch1"]
    assert offline["token_counts"] == [5, 3] and offline["count_mismatches"] == []
    assert offline["tokens_per_s"] > 0 and offline["ready_s"] > 0
    assert 0 < offline["cpu_s"] < 2 * os.cpu_count() * offline["wall_s"]  # 2x: clock ticks
    assert batch1["token_counts"] == [3] and batch1["count_mismatches"] == []
    assert batch1["decode_s_per_token"] > 0
    assert batch1["ready_s"] == offline["ready_s"]  # one load for both parts


@pytest.mark.slow
def test_engine_http_part_streams_every_request(args):
    (r,) = bench_vllm.run_system("engine", "float32", ["http"], WORKLOAD, [], args).values()
    assert r["token_counts"] == [5, 3] and r["count_mismatches"] == []
    assert len(r["ttfts"]) == 2 and 0 < r["ttft_p50_s"] <= r["wall_s"]
    assert min(r["ttfts"]) <= r["ttft_mean_s"] <= max(r["ttfts"])
    assert r["served_model"] and r["ready_s"] > 0
    assert 0 < r["client_cpu_s"] < r["wall_s"]  # one thread's CPU over the load
    assert 0 < r["server_cpu_s"] < 2 * os.cpu_count() * r["wall_s"]


@pytest.mark.parametrize("idle", [False, True])
def test_the_client_thread_is_idle_only_when_asked_and_the_caller_keeps_its_policy(idle):
    before = os.sched_getscheduler(0)
    policy = on_client_thread(lambda: os.sched_getscheduler(0), idle=idle)
    assert policy == (os.SCHED_IDLE if idle else before)
    assert os.sched_getscheduler(0) == before


def test_the_client_thread_hands_back_its_exception():
    def fail():
        raise TimeoutError("no answer")

    with pytest.raises(TimeoutError, match="no answer"):
        on_client_thread(fail, idle=True)


def test_client_idle_defaults_off(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench_vllm.py", "--systems", "engine"])
    assert bench_vllm.parse_args().client_idle is False
    monkeypatch.setattr(sys, "argv", ["bench_vllm.py", "--systems", "engine", "--client-idle"])
    assert bench_vllm.parse_args().client_idle is True
