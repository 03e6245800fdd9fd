"""Chrome Trace Event JSON of a run: a track per request, the steps' track, microseconds."""

import json

from playground.record.trace import ENGINE_PID, REQUESTS_PID, TraceRecorder, chrome_trace
from tests.playground.boards import request, step
from tests.playground.driving import fixed


def _track(trace: dict, name: str) -> list[dict]:
    names = [e for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
    tid = next(e["tid"] for e in names if e["args"]["name"] == name)
    return [e for e in trace["traceEvents"]
            if e["pid"] == REQUESTS_PID and e["tid"] == tid and e["ph"] != "M"]  # fmt: skip


def test_a_request_track_has_its_waits_chunks_decode_preemption_and_stop_reason():
    steps = [
        step(1, start=1.0, prefill=8, events=[("admitted", "a", "12 tokens, 0 cached"),
                                              ("prefill_chunk", "a", "8/12 tokens")]),
        step(2, start=1.1, prefill=4, events=[("prefill_done", "a", "12/12 tokens")]),
        step(3, start=1.2, decode=1),
        step(4, start=1.3, events=[("preempted", "a")]),
        step(5, start=1.5, prefill=14, events=[("admitted", "a", "14 tokens, 0 cached"),
                                               ("prefill_done", "a", "14/14 tokens")]),
        step(6, start=1.6, decode=1, events=[("finished", "a", "eos")]),
    ]  # fmt: skip
    a = request("a", status="finished", stop="eos", arrival=0.5, scheduled=1.0, first=1.15,
                finished=1.65, preemptions=1)  # fmt: skip
    trace = chrome_trace(steps, [a], {"a": "a · Ada"})
    track = _track(trace, "a · Ada")
    slices = [(e["name"], e["ts"], e["dur"]) for e in track if e["ph"] == "X"]
    assert slices == [
        ("waiting", 0.0, 500_000.0),  # microseconds since the run's first event (arrival)
        ("prefill chunk 1", 500_000.0, 50_000.0),
        ("prefill chunk 2", 600_000.0, 50_000.0),
        ("decode", 650_000.0, 150_000.0),  # from the first token to the preemption
        ("waiting (preempted)", 800_000.0, 200_000.0),
        ("prefill chunk 1", 1_000_000.0, 50_000.0),
        ("decode", 1_050_000.0, 100_000.0),
    ]
    instants = [(e["name"], e["ts"]) for e in track if e["ph"] == "i"]
    assert instants == [("preempted", 800_000.0), ("finished: eos", 1_150_000.0)]
    engine = [e for e in trace["traceEvents"] if e["pid"] == ENGINE_PID and e["ph"] == "X"]
    assert [e["name"] for e in engine] == [f"step {i}" for i in range(1, 7)]
    assert engine[0]["args"]["prefill tokens"] == 8 and engine[0]["args"]["token budget"] == 64
    counters = {e["name"] for e in trace["traceEvents"] if e["ph"] == "C"}
    assert counters == {"batch size", "tokens", "kv blocks"}


def test_a_request_whose_steps_are_gone_is_drawn_from_its_timestamps():
    b = request("b", status="running", arrival=0.0, scheduled=0.2, first=0.3)
    trace = chrome_trace([step(9, start=0.9)], [b])
    slices = [(e["name"], e["ts"], e["dur"]) for e in _track(trace, "b") if e["ph"] == "X"]
    assert slices == [("waiting", 0.0, 200_000.0), ("prefill", 200_000.0, 100_000.0),
                      ("decode", 300_000.0, 650_000.0)]  # up to the last step's end  # fmt: skip


def test_a_recorded_run_holds_every_request_and_parses(make_engine, tmp_path):
    """More requests than the engine keeps finished states, under KV pressure."""
    engine = make_engine(num_kv_blocks=20, max_num_seqs=6)
    recorder = TraceRecorder()
    ids = [f"r{i}" for i in range(12)]
    for rid in ids:
        engine.add_request(rid, f"prompt of {rid} " * 3, fixed(12))
    while engine.has_unfinished_requests():
        engine.step()
        recorder.record(engine.snapshot())
    trace = json.loads(recorder.write(tmp_path / "run.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert set(ids) <= names
    finished = [e for e in trace["traceEvents"] if e["name"] == "finished: max_tokens"]
    assert len(finished) == 12
    preempted = [e for e in trace["traceEvents"] if e["name"] == "preempted"]
    assert len(preempted) == engine.snapshot().totals.num_preemptions > 0
    assert trace["otherData"]["num_steps"] == engine.snapshot().step
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            assert e["ts"] >= 0 and e["dur"] > 0


def test_the_driver_writes_the_trace_and_the_replay(driver, tmp_path):
    handles = [driver.submit(f"hello {i}", fixed(5), owner="user:Ada") for i in range(3)]
    for h in handles:
        h.result(timeout=60)
    trace = json.loads(driver.write_trace(tmp_path / "t.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {h.request_id for h in handles} <= names
    replay = json.loads(driver.write_replay(tmp_path / "r.json").read_text())
    assert [r["request_id"] for r in replay["requests"]] == [h.request_id for h in handles]
