"""The remote board's pure views and its wiring: tiles, banner, charts and notes from a
RemoteSnapshot; the Gradio board and app.py's flags in remote mode."""

from dataclasses import replace

import gradio as gr
import orjson
import pytest

import app
from engine import SamplingParams
from engine.telemetry import Totals
from playground.access import public
from playground.board.state import BoardState
from playground.remote import charts as remote_charts
from playground.remote import views
from playground.remote.connection import Health
from playground.remote.engine import RemoteSnapshot
from playground.remote.prometheus import ServerMetrics
from playground.ui import build_ui
from tests.api.server import Server, wait_for
from tests.playground.remote.conftest import close, remote_driver
from tests.playground.remote.fake_server import FakeState, fake_app

NOW = 1000.0
OK = Health("ok", "/metrics in 3 ms", NOW - 9)


def snapshot(samples=(), health=OK, **kw) -> RemoteSnapshot:
    fields = dict(step=1, num_waiting=0, num_running=0, num_finished=0, kv_blocks_total=0,
                  kv_blocks_used=0, kv_blocks_cached=0, block_size=0, kv_backend="remote",
                  batching="remote", scheduling_policy="remote", max_num_seqs=0,
                  max_num_batched_tokens=0,
                  requests=(), steps=(), totals=Totals(), server="http://gpu:8000",
                  health=health, samples=tuple(samples), started=NOW - 10)  # fmt: skip
    return RemoteSnapshot(**{**fields, **kw})


def board(*snaps: RemoteSnapshot) -> BoardState:
    lanes = tuple(f"gpu{i}:8000" for i in range(len(snaps)))
    return BoardState(1, lanes, dict(zip(lanes, snaps, strict=True)), {}, (), (), None, False,
                      None, 0.0)  # fmt: skip


def scrape(t, **kw) -> ServerMetrics:
    return ServerMetrics(t=t, **kw)


def test_tiles_say_dash_without_a_scrape_never_zero():
    state = board(snapshot())
    stats = views.render_stats(state)
    assert "server running" in stats and "KV cache used" in stats
    assert stats.count("–") >= 6 and "0%" not in stats
    full = board(snapshot([scrape(NOW - 1, running=3.0, waiting=1.0, kv_usage=0.42)]))
    stats = views.render_stats(full)
    assert ">3<" in stats and ">1<" in stats and "42%" in stats and "server ok" in stats


def test_the_banner_says_down_slow_and_failing_and_clears_when_well():
    down = Health("down", "cannot reach http://gpu:8000 (refused)", NOW - 12)
    banner = views.render_banner(board(snapshot(health=down)), now=NOW)
    assert "not answering" in banner and "12 s" in banner and "reconnects" in banner
    slow = Health("slow", "/metrics took 3.1 s to answer", NOW - 1)
    assert "is slow" in views.render_banner(board(snapshot(health=slow)), now=NOW)
    failing = snapshot(errors=((NOW - 2, "req-3: HTTP 500: boom"),))
    assert "HTTP 500: boom" in views.render_banner(board(failing), now=NOW)
    old = snapshot(errors=((NOW - 60, "req-3: HTTP 500: boom"),))
    assert views.render_banner(board(old, snapshot()), now=NOW) == ""


def test_charts_draw_the_scrapes_and_say_what_is_not_exported():
    samples = [scrape(NOW - 10 + i, running=float(i), waiting=1.0, kv_usage=i / 10,
                      prefix_queries=10.0 * i, prefix_hits=5.0 * i, preemptions=float(i // 2),
                      generation_tokens=20.0 * i) for i in range(4)]  # fmt: skip
    snap = snapshot(samples, finish_reasons={"stop": 2, "abort": 1})
    queue = remote_charts.queue_spec(snap)
    assert [t["name"] for t in queue["data"]] == ["running", "waiting"]
    assert queue["data"][0]["y"] == [0.0, 1.0, 2.0, 3.0] and queue["data"][0]["x"][0] == 0.0
    kv = remote_charts.kv_spec(snap)
    assert kv["data"][0]["y"] == [0.0, 10.0, 20.0, 30.0]
    assert kv["data"][1]["y"] == [None, 50.0, 50.0, 50.0]  # hits / queries per scrape
    assert kv["data"][2]["x"] == [2.0]  # a preemption between the 2nd and 3rd scrapes
    assert "no block map" in kv["layout"]["title"]["text"]
    batch = remote_charts.iteration_spec(snap)
    assert "does not export vllm:iteration_tokens_total" in batch["layout"]["title"]["text"]
    tput = remote_charts.throughput_spec(snap)
    assert tput["data"][0]["y"] == [None, 20.0, 20.0, 20.0]
    stops = remote_charts.stops_spec(snap)
    assert stops["data"][0]["y"][:3] == [2, 0, 1]  # stop, length, abort
    empty = remote_charts.queue_spec(snapshot())
    assert "no scrape of /metrics yet" in empty["layout"]["title"]["text"]
    figures = views.figures(board(snap, snap))
    assert {"queue", "batch", "kv", "timeline", "cmp_queue1", "cmp_batch0"} <= set(figures)
    orjson.dumps(figures)  # plain JSON for the page


def test_the_inspector_and_the_log_are_notes_not_numbers():
    snap = snapshot(log=((NOW - 5, "req-1", "first token after 0.20 s"),
                         (NOW - 4, None, "server down: refused")))  # fmt: skip
    stats, _, log, inspector, scoreboard = views.board_values(board(snap), None)
    assert "req-1: first token after 0.20 s" in log and "server down" in log
    assert log.index("server down") < log.index("first token")  # the latest first
    assert "does not expose" in inspector and "two servers" in scoreboard


@pytest.fixture
def fake_url():
    server = Server(fake_app(FakeState()))
    yield server.url
    server.stop()


def test_the_board_over_a_server_hides_the_engine_knobs_and_sends_the_visitor_there(fake_url):
    driver = remote_driver(fake_url)
    try:
        demo = build_ui(driver)
        hidden = {b.label for b in demo.blocks.values()
                  if isinstance(b, gr.Slider | gr.Radio) and not b.visible}  # fmt: skip
        assert {"batching", "queue policy", "token budget / step", "KV blocks"} <= hidden
        texts = " ".join(str(b.value) for b in demo.blocks.values() if isinstance(b, gr.HTML))
        assert "on a remote server" in texts and "own flags: watch its queues" in texts
        params = public.sampling_params(max_tokens=8)
        handle = public.submit_text(driver, "hello", params, "visitor:abc")  # no tokenizer here
        out = handle.result(timeout=20)
        assert out.text == "Hello there" and out.stop_reason.value == "eos"
        record = wait_for(lambda: [r for r in driver.state().records if r.finished])[0]
        assert record.owner == "visitor:abc" and record.prompt == "hello"
    finally:
        close(driver)


def test_flags_of_the_remote_mode():
    args = app.parse_args(["--engine-url", "gpu:8000/v1", "--engine-url", "http://b:8000"])
    assert args.engine_url == ["http://gpu:8000", "http://b:8000"]
    assert app.parse_args([]).engine_url == []
    for bad in (["--engine-url", "ftp://x"], ["--engine-url", "a:1"] * 3,
                ["--engine-url", "a:1", "--engine-concurrency", "0"]):  # fmt: skip
        with pytest.raises(SystemExit):
            app.parse_args(bad)


def test_the_public_limits_still_apply_without_a_tokenizer(fake_url):
    driver = remote_driver(fake_url)
    try:
        driver.limits = replace(driver.limits, max_tokens=4)
        with pytest.raises(public.RequestRejected, match="max_tokens") as refused:
            public.submit_text(driver, "hello", SamplingParams(max_tokens=8), "visitor:abc")
        assert refused.value.code == "limit_exceeded" and not driver.state().records
    finally:
        close(driver)
