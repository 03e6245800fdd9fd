"""bench_throughput --trace-dir: an engine system's timed run as a Chrome trace and a replay
file that reruns it to the same tokens."""

import argparse
import json

from bench import bench_throughput
from bench.workload import make_workload
from playground.record.replay import Replay
from playground.record.rerun import compare_outputs, run_offline
from tests.tiny_models import make_engine


def test_a_timed_engine_run_writes_a_trace_of_every_request(tiny_model, tmp_path):
    model, tokenizer = tiny_model
    args = argparse.Namespace(max_num_seqs=4, max_num_batched_tokens=64, num_kv_blocks=64)
    workload = make_workload(tokenizer, 6, prompt_len=(8, 20), max_tokens=(3, 6))
    path = tmp_path / "engine_continuous.trace.json"
    bench_throughput.run_engine(model, tokenizer, workload, args,
                                bench_throughput.NoiseGuard(None), trace=path)  # fmt: skip
    trace = json.loads(path.read_text())
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {str(i) for i in range(6)} <= tracks  # the warm-up request is not in it
    assert sum(e["name"] == "finished: max_tokens" for e in trace["traceEvents"]) == 6
    replay = Replay.load(tmp_path / "engine_continuous.replay.json")
    assert len(replay.requests) == 6 and all(r.output for r in replay.requests)
    engine = make_engine(model, tokenizer, replay.config)
    assert compare_outputs(replay, run_offline(engine, replay)) == []
