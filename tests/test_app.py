"""app.py: the command line's flags, and the app it serves (board + /health)."""

import pytest
from fastapi.testclient import TestClient

import app
from playground.access.limits import PublicLimits
from playground.cli.startup import engine_config, public_limits


def test_create_app_serves_the_board_and_health(driver):
    with TestClient(app.create_app(driver)) as client:
        health = client.get("/health")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert client.get("/healthz").json().keys() == health.json().keys()  # its older name
        page = client.get("/")
        assert page.status_code == 200 and "gradio" in page.text.lower()
        assert "Continuous batching playground" in client.get("/openapi.json").text  # the API's
        assert "access-control-allow-origin" not in health.headers  # no CORS unless asked


def test_cli_flags_map_to_engine_config(monkeypatch):
    args = app.parse_args(["--max-num-seqs", "4", "--num-kv-blocks", "64",
                           "--batching", "static", "--scheduling-policy", "priority",
                           "--no-prefix-caching"])  # fmt: skip
    cfg = engine_config(args)
    assert (cfg.max_num_seqs, cfg.num_kv_blocks, cfg.batching) == (4, 64, "static")
    assert cfg.scheduling_policy == "priority"
    assert cfg.enable_prefix_caching is False and cfg.enable_chunked_prefill is True
    assert cfg.torch_compile is False
    assert engine_config(app.parse_args(["--torch-compile"])).torch_compile is True
    assert cfg.attention_backend == "auto"
    sdpa = engine_config(app.parse_args(["--attention-backend", "sdpa"]))
    assert sdpa.attention_backend == "sdpa"
    limits = public_limits(app.parse_args(["--limit-max-tokens", "64", "--limit-in-flight",
                                           "2", "--request-timeout", "0"]))  # fmt: skip
    assert (limits.max_tokens, limits.max_in_flight, limits.default_timeout_s) == (64, 2, None)
    assert public_limits(app.parse_args([])) == PublicLimits()
    monkeypatch.delenv("SPACE_ID", raising=False)
    monkeypatch.delenv("GRADIO_SERVER_PORT", raising=False)
    monkeypatch.setenv("PORT", "9999")
    assert app.resolve_host_port(app.parse_args([])) == ("127.0.0.1", 9999)
    monkeypatch.setenv("SPACE_ID", "someone/space")
    assert app.resolve_host_port(app.parse_args(["--port", "1234"])) == ("0.0.0.0", 1234)
    assert app.resolve_host_port(app.parse_args(["--host", "10.0.0.1"]))[0] == "10.0.0.1"


def test_stream_interval_flag(capsys):
    assert app.parse_args([]).stream_interval == 1
    assert app.parse_args(["--stream-interval", "4"]).stream_interval == 4
    for bad in ("0", "two"):
        with pytest.raises(SystemExit):
            app.parse_args(["--stream-interval", bad])
        assert "--stream-interval" in capsys.readouterr().err


def test_serving_nice_flag(capsys):
    assert app.parse_args([]).serving_nice == 0
    assert app.parse_args(["--serving-nice", "19"]).serving_nice == 19
    for bad in ("-1", "20", "low"):
        with pytest.raises(SystemExit):
            app.parse_args(["--serving-nice", bad])
        assert "--serving-nice" in capsys.readouterr().err


def test_vllm_serve_spellings(monkeypatch):
    hub_id = "Qwen/Qwen2.5-0.5B-Instruct"
    flags = ["--num-gpu-blocks-override", "96", "--no-enable-prefix-caching",
             "--no-enable-chunked-prefill", "--served-model-name", "qwen", hub_id]  # fmt: skip
    args = app.parse_args([hub_id, *flags])
    cfg = engine_config(args)
    assert args.model == hub_id and cfg.num_kv_blocks == 96
    assert cfg.enable_prefix_caching is False and cfg.enable_chunked_prefill is False
    assert args.served_model_name == ["qwen", hub_id]
    assert app.parse_args(["--model", "gpt2"]).model == "gpt2"
    assert app.parse_args([]).model == "default" and app.parse_args([]).served_model_name is None
    plain = engine_config(app.parse_args(["--enable-prefix-caching", "--no-chunked-prefill"]))
    assert plain.enable_prefix_caching is True and plain.enable_chunked_prefill is False
    with pytest.raises(SystemExit):
        app.parse_args(["gpt2", "--model", "other"])  # the model given twice


def test_one_served_name_everywhere(driver):
    from prometheus_client.parser import text_string_to_metric_families

    with TestClient(app.create_app(driver, ["smol", "HuggingFaceTB/SmolLM2-135M-Instruct"])) as c:
        assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["smol"]
        for alias in ("smol", "HuggingFaceTB/SmolLM2-135M-Instruct", "default"):
            body = {"model": alias, "prompt": "hi", "max_tokens": 1}
            assert c.post("/v1/completions", json=body).json()["model"] == "smol"
        assert c.post("/v1/completions", json={"model": "x", "prompt": "hi"}).status_code == 404
        families = text_string_to_metric_families(c.get("/metrics").text)
        labels = {s.labels.get("model_name") for f in families for s in f.samples
                  if f.name.startswith("vllm:num_requests")}  # fmt: skip
        assert labels == {"smol"}


def test_health_and_healthz_once_the_driver_stopped(driver):
    with TestClient(app.create_app(driver)) as client:
        assert client.get("/health").status_code == 200
        driver.stop()
        assert client.get("/health").status_code == 503
        assert client.get("/healthz").status_code == 503  # the older name answers the same


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
