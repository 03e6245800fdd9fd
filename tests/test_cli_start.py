"""What the flags do once parsed (playground/cli/startup.py, loading.py, stats_log.py): the
model loaded with vLLM's loading flags, the HTTP server's vLLM settings, the stats line."""

import logging
from types import SimpleNamespace

import pytest
import torch
from fastapi.testclient import TestClient

import app
from engine import SamplingParams
from playground.cli import model_source, parse_args
from playground.cli.loading import chat_template, check_kv_cache_dtype, hub_options
from playground.cli.model_source import StartupError, check_model
from playground.cli.startup import engine_config, load_engine, seeded_factory
from playground.cli.stats_log import StatsLogger
from playground.driver import EngineDriver
from tests.api.server import TINY_MODEL, bare_app
from tests.tiny_models import make_tiny_model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, default_model):
    """A model folder on disk: the tiny random Llama and the bundled model's tokenizer."""
    folder = tmp_path_factory.mktemp("tiny")
    make_tiny_model("llama", max_position_embeddings=512).save_pretrained(folder)
    default_model[1].save_pretrained(folder)
    return folder


def test_loading_flags_reach_the_engine(tiny_dir, tmp_path):
    """--tokenizer, --load-format, --chat-template (a file), --kv-cache-dtype and --seed, in
    one real start of the tiny model; --seed also seeds the engines a reset builds."""
    (tmp_path / "t.jinja").write_text("{% for m in messages %}<{{ m.content }}>{% endfor %}")
    flags = [str(tiny_dir), "--tokenizer", str(tiny_dir), "--load-format", "safetensors",
             "--chat-template", str(tmp_path / "t.jinja"), "--kv-cache-dtype", "float32",
             "--seed", "11", "--max-num-seqs", "4", "--num-kv-blocks", "64"]  # fmt: skip
    args = parse_args(flags)
    engine = load_engine(args, engine_config(args))
    assert engine.config.max_num_seqs == 4 and engine.model.dtype == torch.float32
    assert engine.tokenizer.chat_template.startswith("{% for m in messages %}")
    params = SamplingParams(max_tokens=6, temperature=1.0)
    first = engine.generate(["hello"], params)[0].token_ids
    rebuilt = seeded_factory(engine, args.seed)(engine_config(args))  # what a reset builds
    assert rebuilt.generate(["hello"], params)[0].token_ids == first
    with pytest.raises(StartupError, match="--kv-cache-dtype 'fp8'"):
        load_engine(parse_args([str(tiny_dir), "--kv-cache-dtype", "fp8"]), engine_config(args))


def test_chat_template_as_vllm_reads_it(tmp_path):
    """vllm/renderers/chat_utils.py (_load_chat_template): a readable file's contents; else
    the text itself when it has a Jinja character ({, } or a newline); else an error that
    says the value looked like a path."""
    path = tmp_path / "c.jinja"
    path.write_text("{{ messages[0].content }}")
    assert chat_template(str(path)) == "{{ messages[0].content }}"
    assert chat_template("{{ bos_token }}x") == "{{ bos_token }}x"
    assert chat_template(None) is None
    with pytest.raises(StartupError, match="looks like a file's path"):
        chat_template("templates/missing.jinja")


def test_hub_options_and_kv_cache_dtype():
    """--load-format: vLLM's 'safetensors' / 'pt' / 'auto' (vllm/config/load.py) map to
    transformers' use_safetensors; --kv-cache-dtype: 'auto' or the model's dtype
    (vllm/config/cache.py: 'auto' = the model's)."""
    args = parse_args(["--revision", "r1", "--trust-remote-code", "--hf-token", "t",
                       "--download-dir", "/d", "--load-format", "pt"])  # fmt: skip
    assert hub_options(args) == {"revision": "r1", "trust_remote_code": True, "token": "t",
                                 "cache_dir": "/d", "use_safetensors": False}  # fmt: skip
    assert hub_options(parse_args([])) == {}
    check_kv_cache_dtype("auto", torch.bfloat16)
    check_kv_cache_dtype("bfloat16", torch.bfloat16)
    with pytest.raises(StartupError, match="model's dtype \\(float32\\)"):
        check_kv_cache_dtype("fp8_e4m3", torch.float32)


def test_unknown_hub_id_without_network(monkeypatch):
    """Not cached and the hub unreachable: one sentence that names the model and the fix."""

    def unreachable(*args, **kwargs):
        raise ConnectionError("Name or service not known")

    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "model_info", unreachable)
    with pytest.raises(StartupError) as exc:
        check_model("someone/not-cached-model")
    text = str(exc.value)
    assert "'someone/not-cached-model' is not in the local cache" in text
    assert "the hub cannot be reached" in text and "\n" not in text
    with pytest.raises(StartupError, match="neither a folder here nor a hub id"):
        check_model("bad id with spaces")
    assert model_source.check_model("default") is None


def test_frontend_flags_shape_the_server(driver, caplog):
    """--root-path, --allowed-origins (CORS), --disable-fastapi-docs and
    --enable-log-requests, as vllm/entrypoints/launchers/app.py applies them."""
    args = parse_args(["--root-path", "/lab", "--allowed-origins", '["http://a.example"]',
                       "--disable-fastapi-docs", "--enable-log-requests"])  # fmt: skip
    frontend = app.Frontend.from_args(args)
    with TestClient(app.create_app(driver, frontend=frontend)) as client:
        assert client.app.root_path == "/lab"
        for path in ("/docs", "/redoc"):
            assert client.get(path).status_code == 404
        assert "Continuous batching playground" not in client.get("/openapi.json").text
        preflight = client.options("/v1/models", headers={
            "Origin": "http://a.example", "Access-Control-Request-Method": "GET"})  # fmt: skip
        assert preflight.headers["access-control-allow-origin"] == "http://a.example"
        with caplog.at_level(logging.INFO, logger="app"):
            assert client.get("/v1/models").status_code == 200
        assert any("GET /v1/models" in r.getMessage() for r in caplog.records)


def test_stats_line_as_vllm_logs_it():
    """vllm/v1/metrics/loggers.py (LoggingStatLogger): throughput since the previous line,
    running and waiting requests, KV cache use; idle only when this interval and the one
    before had no tokens; never negative across a board reset."""
    stats = StatsLogger(last_time=0.0)

    def snap(prompt, generated, used):
        totals = SimpleNamespace(num_prompt_tokens=prompt, num_generated_tokens=generated)
        return SimpleNamespace(totals=totals, num_running=2, num_waiting=1,
                               kv_blocks_used=used, kv_blocks_total=64)  # fmt: skip

    text, idle = stats.line(snap(100, 50, 16), now=10.0)
    assert not idle
    assert text == (
        "Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 5.0 tokens/s, "
        "Running: 2 reqs, Waiting: 1 reqs, KV cache usage: 25.0%"
    )
    assert stats.line(snap(100, 50, 0), now=20.0)[1] is False  # the interval before had tokens
    assert stats.line(snap(100, 50, 0), now=30.0)[1] is True
    # a reset board: its new engine counts from 0, so this line counts from 0 too, not below
    assert stats.line(snap(30, 20, 0), now=40.0)[0].startswith(
        "Avg prompt throughput: 3.0 tokens/s, Avg generation throughput: 2.0 tokens/s"
    )


def test_sse_keep_alive_interval_reaches_the_stream(make_engine):
    """--sse-keep-alive-interval (vllm/entrypoints/launchers/cli_args.py: seconds, 0 = no
    comments): a stream that waits on a paused board comments at that interval, or not at
    all with 0."""
    assert app.Frontend.from_args(parse_args(["--sse-keep-alive-interval", "0"])) == app.Frontend(
        sse_keep_alive_interval=0
    )
    driver = EngineDriver(make_engine(), max_pause_s=1.2)  # the pause ends by itself
    body = {"model": TINY_MODEL, "prompt": "hi", "max_tokens": 2, "stream": True}
    try:
        for interval, commented in ((0.3, True), (0, False)):
            with TestClient(bare_app(lambda: driver, sse_keep_alive_interval=interval)) as client:
                driver.pause()
                raw = client.post("/v1/completions", json=body).text
            comments = [e for e in raw.split("\n\n") if e.startswith(":")]
            assert bool(comments) is commented and raw.endswith("data: [DONE]\n\n"), raw
    finally:
        driver.stop()
