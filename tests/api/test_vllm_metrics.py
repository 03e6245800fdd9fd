"""/metrics updated when vLLM updates them (vllm/v1/metrics/stats.py IterationStats and
vllm/v1/metrics/loggers.py PrometheusStatLogger.record): prompt tokens and TTFT when the
prefill completes, one inter-token latency per later output, the rest when a request ends;
every finished_reason from 0; the tokens of every engine step."""

import time

import httpx
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from engine import SamplingParams
from engine.telemetry import MAX_STEP_RECORDS
from tests.api.server import TINY_MODEL, bare_app


def _samples(text: str) -> dict[str, float]:
    out = {}
    for f in text_string_to_metric_families(text):
        for s in f.samples:
            extra = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())
                             if k not in ("model_name", "engine"))  # fmt: skip
            out[s.name + (f"{{{extra}}}" if extra else "")] = s.value
    return out


def test_every_finished_reason_is_there_from_the_start(make_driver):
    """loggers.py: counter_request_success is created for every FinishReason at start."""
    driver = make_driver()
    with TestClient(bare_app(lambda: driver)) as http:
        samples = _samples(http.get("/metrics").text)
    for reason in ("stop", "length", "abort", "error", "repetition"):
        assert samples[f"vllm:request_success_total{{finished_reason={reason}}}"] == 0
    assert samples["process_cpu_seconds_total"] > 0  # the process collector, as vLLM's
    driver.stop()


def test_prompt_tokens_count_at_the_first_token_and_latencies_at_the_end(make_driver):
    """stats.py update_from_output: prompt tokens and TTFT when prefilling ends, an ITL per
    output after it; update_from_finished_request: e2e, queue, prefill, decode, inference."""
    driver = make_driver()
    driver.set_pace(20)  # slow motion: the request is mid-way at the second scrape
    body = {"model": TINY_MODEL, "prompt": "count me", "max_tokens": 40, "ignore_eos": True,
            "stream": True, "temperature": 0}  # fmt: skip
    with TestClient(bare_app(lambda: driver)) as http:
        before = _samples(http.get("/metrics").text)
        with http.stream("POST", "/v1/completions", json=body) as r:
            lines = r.iter_lines()
            for _ in range(3):
                next(line for line in lines if line.startswith("data: "))
            time.sleep(0.3)  # a few more outputs
            during = _samples(http.get("/metrics").text)
            list(lines)
        after = _samples(http.get("/metrics").text)
    num_prompt = len(driver.tokenizer.encode("count me"))
    grew = {k: during[k] - before.get(k, 0) for k in during}
    assert grew["vllm:prompt_tokens_total"] == num_prompt  # before it finished
    assert grew["vllm:time_to_first_token_seconds_count"] == 1
    assert grew["vllm:inter_token_latency_seconds_count"] >= 2
    assert grew["vllm:e2e_request_latency_seconds_count"] == 0
    assert grew["vllm:request_success_total{finished_reason=length}"] == 0
    assert (
        after["vllm:inter_token_latency_seconds_count"]
        - before.get("vllm:inter_token_latency_seconds_count", 0)
        == 39
    )  # one per output after the first
    for phase in ("e2e_request_latency", "request_queue_time", "request_prefill_time",
                  "request_decode_time", "request_inference_time"):  # fmt: skip
        assert after[f"vllm:{phase}_seconds_count"] == 1, phase
    assert after["vllm:request_decode_time_seconds_sum"] > 1.0  # 39 outputs at 20 steps/s
    assert after["vllm:request_generation_tokens_sum"] == 40
    assert after["vllm:request_prompt_tokens_sum"] == num_prompt
    assert after["vllm:prompt_tokens_total"] == num_prompt  # not counted again at the end
    # every step's prompt tokens and generated tokens: the prompt and its 40 tokens
    assert after["vllm:iteration_tokens_total_sum"] == num_prompt + 40
    assert after["vllm:iteration_tokens_total_count"] == 40  # the prefill, 39 decodes
    driver.stop()


def test_iteration_tokens_count_every_step_however_long_between_scrapes(make_driver):
    """loggers.py record: histogram_iteration_tokens observes each iteration once, as it
    happens, with its computed prompt tokens plus its generated tokens (stats.py
    IterationStats). More steps than the engine keeps records of run between two scrapes."""
    driver = make_driver()
    num_tokens = MAX_STEP_RECORDS // 3 + 10
    params = SamplingParams(max_tokens=num_tokens, temperature=0, ignore_eos=True)
    prompts = ["first one", "then a second", "and a third"]  # one block or less: none cached
    with TestClient(bare_app(lambda: driver)) as http:
        before = _samples(http.get("/metrics").text)
        for prompt in prompts:  # one at a time: every step runs one request's tokens
            driver.submit(prompt, params).result(timeout=60)
        after = _samples(http.get("/metrics").text)
    grew = {k: after[k] - before.get(k, 0) for k in after}
    num_steps = len(prompts) * num_tokens  # each: its prefill, then num_tokens - 1 decodes
    assert num_steps > MAX_STEP_RECORDS
    assert grew["vllm:iteration_tokens_total_count"] == num_steps
    assert grew["vllm:iteration_tokens_total_bucket{le=+Inf}"] == num_steps
    num_prompt = sum(len(driver.tokenizer.encode(p)) for p in prompts)
    assert grew["vllm:iteration_tokens_total_sum"] == num_prompt + len(prompts) * num_tokens
    assert grew["vllm:iteration_tokens_total_bucket{le=1}"] == num_steps - len(prompts)


def test_cache_config_info_has_vllms_labels(app_server):
    """loggers.py log_metrics_info: vllm:cache_config_info, a gauge at 1, CacheConfig's fields
    as labels (vllm/config/cache.py metrics_info: every field; those that mean something here)
    and the engine."""
    text = httpx.get(app_server.url + "/metrics").text
    [info] = [f for f in text_string_to_metric_families(text) if f.name == "vllm:cache_config_info"]
    [sample] = info.samples
    config, snap = app_server.driver.config, app_server.driver.snapshot()
    assert info.type == "gauge" and sample.value == 1
    blocks, size = snap.kv_blocks_total, config.block_size
    assert sample.labels == {
        "block_size": str(size), "cache_dtype": "auto",
        "enable_prefix_caching": str(config.enable_prefix_caching),
        "num_gpu_blocks": str(blocks), "num_gpu_blocks_override": str(config.num_kv_blocks),
        "kv_cache_size_tokens": str(blocks * size),
        # a request at max_model_len holds max_model_len / block_size blocks
        "kv_cache_max_concurrency": str(blocks * size / snap.max_model_len),
        "hash_block_size": str(size), "cache_hit_alignment_tokens": str(size), "engine": "0",
    }  # fmt: skip
