"""app.py: the command line's flags, and the app it serves (board + /healthz)."""

import pytest
from fastapi.testclient import TestClient

import app
from playground.limits import PublicLimits


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
    assert cfg.torch_compile is False
    assert app.engine_config(app.parse_args(["--torch-compile"])).torch_compile is True
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


def test_control_flags_choose_who_drives(monkeypatch):
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert app.control_seat(app.parse_args([])).mode == "open"  # a laptop
    monkeypatch.setenv("SPACE_ID", "someone/space")
    assert app.control_seat(app.parse_args([])).mode == "seat"  # a Space
    locked = app.control_seat(app.parse_args(["--controls", "locked"]))
    assert locked.mode == "locked" and len(locked.presenter_key) >= 16  # a random key
    keyed = app.control_seat(app.parse_args(["--presenter-key", "lecture"]))
    assert keyed.mode == "locked" and keyed.presenter_key == "lecture"
    args = app.parse_args(["--controls", "seat", "--seat-term", "30", "--seat-idle", "5",
                           "--max-pause", "7", "--pace", "0.5"])  # fmt: skip
    policy = app.control_seat(args).policy
    assert (policy.term_s, policy.idle_s, args.max_pause, args.pace) == (30, 5, 7, "0.5")
    for bad in (["--seat-idle", "0"], ["--max-pause", "-1"], ["--pace", "1e-9"],
                ["--controls", "everyone"]):  # fmt: skip
        with pytest.raises(SystemExit):
            app.parse_args(bad)
