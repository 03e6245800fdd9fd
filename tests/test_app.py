"""app.py: the command line's flags, and the app it serves (board + /healthz)."""

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
                           "--batching", "static", "--scheduling-policy", "priority",
                           "--no-prefix-caching"])  # fmt: skip
    cfg = app.engine_config(args)
    assert (cfg.max_num_seqs, cfg.num_kv_blocks, cfg.batching) == (4, 64, "static")
    assert cfg.scheduling_policy == "priority"
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
