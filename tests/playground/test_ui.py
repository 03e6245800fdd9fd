"""The Blocks build, the app's routes and CLI, and what one timer tick costs."""

import time
from dataclasses import replace

import gradio as gr
from fastapi.testclient import TestClient
from gradio.components.plot import PlotData

import app
from playground.limits import PublicLimits
from playground.ui import TICK_S, build_ui
from playground.views import (
    COMPARE_KEYS,
    PLOT_KEYS,
    FigureCache,
    board_values,
    chart_values,
    compare_values,
)
from tests.playground.factories import busy_board


def test_build_ui_returns_blocks_with_one_timer(driver):
    demo = build_ui(driver)
    assert isinstance(demo, gr.Blocks)
    timers = [b for b in demo.blocks.values() if isinstance(b, gr.Timer)]
    assert len(timers) == 1 and timers[0].value <= 0.5


def test_create_app_serves_the_board_and_healthz(driver):
    with TestClient(app.create_app(driver)) as client:
        health = client.get("/healthz")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        page = client.get("/")
        assert page.status_code == 200 and "gradio" in page.text.lower()


def test_cli_flags_map_to_engine_config(monkeypatch):
    args = app.parse_args(["--max-num-seqs", "4", "--num-kv-blocks", "64",
                           "--scheduling-policy", "static", "--no-prefix-caching"])  # fmt: skip
    cfg = app.engine_config(args)
    assert (cfg.max_num_seqs, cfg.num_kv_blocks, cfg.scheduling_policy) == (4, 64, "static")
    assert cfg.enable_prefix_caching is False and cfg.enable_chunked_prefill is True
    limits = app.public_limits(app.parse_args(["--limit-max-tokens", "64", "--limit-in-flight",
                                               "2", "--request-timeout", "0"]))  # fmt: skip
    assert (limits.max_tokens, limits.max_in_flight, limits.default_timeout_s) == (64, 2, None)
    assert app.public_limits(app.parse_args([])) == PublicLimits()
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv("GRADIO_SERVER_PORT", raising=False)
    monkeypatch.setenv("PORT", "9999")
    assert app.resolve_host_port(app.parse_args([])) == ("127.0.0.1", 9999)
    monkeypatch.setenv("SPACE_ID", "someone/space")
    assert app.resolve_host_port(app.parse_args(["--port", "1234"])) == ("0.0.0.0", 1234)
    assert app.resolve_host_port(app.parse_args(["--host", "10.0.0.1"]))[0] == "10.0.0.1"


def test_a_redraw_of_a_full_board_costs_little():
    """32 users, 500 steps: the HTML and the chart JSON (what Gradio sends) of a new version."""
    costs = []
    for version in range(1, 6):
        state = busy_board(num_users=32, num_steps=500, version=version)
        t0 = time.perf_counter()
        html = board_values(state, "visitor:me", None, ())
        sent, *plots = chart_values(state, FigureCache())
        costs.append(time.perf_counter() - t0)
    assert all(isinstance(h, str) for h in html) and len(plots) == len(PLOT_KEYS)
    assert all(isinstance(v, PlotData) for v in plots) and set(sent) == set(PLOT_KEYS)
    best = min(costs)
    print(f"redraw cost, 32 users x 500 steps: best {best * 1000:.1f} ms")
    assert best < 0.1, f"{best * 1000:.0f} ms"  # ~4 ms on an idle core; loose for CI


def test_a_session_is_sent_only_the_charts_that_changed():
    cache = FigureCache()
    board = busy_board(num_users=4, num_steps=20, version=1)
    sent, *plots = chart_values(board, cache)
    assert sum(isinstance(v, PlotData) for v in plots) == 7
    same_charts = replace(board, version=2, paused=True)  # new version, same charts
    _, *again = chart_values(same_charts, cache, sent)
    assert not any(isinstance(v, PlotData) for v in again)
    _, *other_session = chart_values(same_charts, cache, {})
    assert sum(isinstance(v, PlotData) for v in other_session) == 7


def test_compare_charts_are_drawn_only_in_compare_mode():
    board = busy_board(num_users=4, num_steps=20)
    cache = FigureCache()
    assert not any(isinstance(v, PlotData) for v in compare_values(board, cache)[1:])
    lanes = ("continuous", "static")
    both = replace(board, version=2, lanes=lanes, snapshots=dict.fromkeys(lanes, board.snapshot),
                   stats=dict.fromkeys(lanes, board.stats["main"]))  # fmt: skip
    sent, *plots = compare_values(both, cache)
    assert len(plots) == len(COMPARE_KEYS) and all(isinstance(v, PlotData) for v in plots)
    assert set(sent) == set(COMPARE_KEYS)


def test_the_timer_slows_down_while_many_sessions_watch(driver):
    """The tick answers the session's timer interval: TICK_S for a few watchers, longer for
    more (charts likewise), so a small CPU is not spent on redraws."""
    demo = build_ui(driver)
    tick = next(f.fn for f in demo.fns.values() if f.name == "tick")  # timer and page load

    def interval(session: str, every: float):  # the timer output of one tick
        out = tick(-1, -1, 0.0, None, every, gr.Request(session_hash=session))
        return out[4]

    assert interval("s0", TICK_S) == gr.skip()  # one watcher: the timer is left as it is
    assert interval("s0", 1.0) == TICK_S  # a slowed-down timer is set back
    for i in range(1, 8):
        interval(f"s{i}", TICK_S)
    assert interval("s0", TICK_S) == 2 * TICK_S  # 8 watchers, 4 at full rate


def test_the_watchdog_banner_is_sent_only_when_it_can_have_changed(driver):
    demo = build_ui(driver)
    tick = next(f.fn for f in demo.fns.values() if f.name == "tick")
    request = gr.Request(session_hash="a")
    first = tick(-1, -1, 0.0, None, TICK_S, request)
    assert first[5] == ""  # a new board version: the (empty) banner comes with it
    version = first[0]
    assert tick(version, version, 0.0, None, TICK_S, request)[5] == gr.skip()
