"""GET /metrics: Prometheus text that prometheus_client parses, with counters that move; names,
types, labels and buckets as vLLM 0.32's (vllm/v1/metrics/loggers.py and buckets.py)."""

import httpx
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from engine import SamplingParams, llm_engine
from tests.api.server import TINY_MODEL, bare_app

FAMILIES = {  # parsed family name -> type (counters lose their _total)
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:num_requests_waiting_by_reason": "gauge",
    "cb_playground:num_requests_waiting_by_reason": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "cb_playground:prefix_cache_hit_rate": "gauge",
    "cb_playground:kv_cache_blocks": "gauge",
    "vllm:num_preemptions": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:prefix_cache_queries": "counter",
    "vllm:request_success": "counter",
    "cb_playground:request_stop_reason": "counter",
    "cb_playground:prompt_tokens_computed": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_inference_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:iteration_tokens_total": "histogram",
    "vllm:cache_config_info": "gauge",
    "vllm:admission_rejections": "counter",
}
PROCESS = {"process_cpu_seconds": "counter", "process_resident_memory_bytes": "gauge",
           "python_info": "gauge", "python_gc_collections": "counter"}  # fmt: skip
LATENCY = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
           120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]  # fmt: skip
ITL = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
       20.0, 40.0, 80.0]  # fmt: skip
VLLM_BUCKETS = {  # vLLM's own (vllm/v1/metrics/buckets.py); token counts: 1-2-5 up to the context
    "vllm:time_to_first_token_seconds": [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25,
        0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0],
    "vllm:inter_token_latency_seconds": ITL,
    "vllm:request_time_per_output_token_seconds": ITL,
    "vllm:e2e_request_latency_seconds": LATENCY,
    "vllm:request_queue_time_seconds": LATENCY,
    "vllm:request_inference_time_seconds": LATENCY,
    "vllm:request_prefill_time_seconds": LATENCY,
    "vllm:request_decode_time_seconds": LATENCY,
    "vllm:request_prompt_tokens": [1, 2, 5, 10, 20, 50, 100, 200, 500],  # context: 512
    "vllm:request_generation_tokens": [1, 2, 5, 10, 20, 50, 100, 200, 500],
    "vllm:iteration_tokens_total": [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
                                    16384],
}  # fmt: skip
PER_STEP = ("vllm:iteration_tokens_total", "vllm:inter_token_latency_seconds")
HISTOGRAMS = [h for h in VLLM_BUCKETS if h not in PER_STEP]  # one observation per request


def _scrape(url: str) -> dict[str, float]:
    r = httpx.get(url + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    for name, kind in PROCESS.items():  # the process collectors, as in vLLM's registry
        assert families.pop(name).type == kind, name
    families = {k: f for k, f in families.items() if not k.startswith(("process_", "python_"))}
    assert set(families) == set(FAMILIES)  # vLLM's names, or ours with our prefix
    for name, kind in FAMILIES.items():
        assert families[name].type == kind, name
        assert name.startswith(("vllm:", "cb_playground:")), name
    for name, bounds in VLLM_BUCKETS.items():
        les = [s.labels["le"] for s in families[name].samples if s.name.endswith("_bucket")]
        assert les == [*map(str, bounds), "+Inf"], name
    samples = {}
    for f in families.values():
        for s in f.samples:
            if f.name == "vllm:cache_config_info":  # vLLM's: the config's labels, no model
                assert s.labels["engine"] == "0" and s.value == 1
                continue
            if f.name == "vllm:admission_rejections":  # vLLM's: no engine label
                assert set(s.labels) == {"model_name", "reason"}, s.labels
                samples[f"{s.name}{{reason={s.labels['reason']}}}"] = s.value
                continue
            assert (s.labels["model_name"], s.labels["engine"]) == (TINY_MODEL, "0")
            extra = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())
                             if k not in ("model_name", "engine"))  # fmt: skip
            samples[s.name + (f"{{{extra}}}" if extra else "")] = s.value
    return samples


def test_metrics_parse_and_counters_move(client, app_server):
    before = _scrape(app_server.url)
    r = client.completions.create(model=TINY_MODEL, prompt="metrics please", max_tokens=7)
    after = _scrape(app_server.url)
    assert after["vllm:generation_tokens_total"] >= before["vllm:generation_tokens_total"] + 7
    # each request's prompt length, as vLLM counts it (the prompt is not cached here)
    grown = after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"]
    assert grown >= r.usage.prompt_tokens > 0
    for key in ("vllm:request_success_total{finished_reason=length}",  # vLLM's word
                "cb_playground:request_stop_reason_total{stop_reason=max_tokens}"):  # fmt: skip
        assert after[key] >= before.get(key, 0) + 1
    assert not any("finished_reason=max_tokens" in k for k in after)
    for hist in HISTOGRAMS:
        count = f"{hist}_count"
        assert after[count] >= before[count] + 1
        assert after[f"{hist}_bucket{{le=+Inf}}"] == after[count]
    assert 0 <= after["vllm:kv_cache_usage_perc"] <= 1
    assert r.usage.completion_tokens == 7


def test_finished_reasons_are_vllms(make_driver):
    from playground.server.request_metrics import FINISHED_REASONS

    driver = make_driver()
    with TestClient(bare_app(lambda: driver)) as http:
        params = SamplingParams(max_tokens=50, temperature=0, ignore_eos=True)
        handle = driver.submit("cancel me", params)
        driver.abort(handle.request_id)
        assert handle.result(timeout=30).outputs[0].stop_reason.value == "cancelled"
        text = http.get("/metrics").text
    samples = {(s.name, s.labels.get("finished_reason"), s.labels.get("stop_reason")): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}  # fmt: skip
    assert samples[("vllm:request_success_total", "abort", None)] == 1
    assert samples[("cb_playground:request_stop_reason_total", None, "cancelled")] == 1
    assert set(FINISHED_REASONS.values()) == {"stop", "length", "abort", "error"}


def test_counters_survive_a_board_reset(client, app_server):
    client.completions.create(model=TINY_MODEL, prompt="before the reset", max_tokens=3)
    before = _scrape(app_server.url)
    app_server.driver.reset()  # a fresh engine: its own totals restart at zero
    after = _scrape(app_server.url)
    for name in (
        "vllm:generation_tokens_total",
        "vllm:request_success_total{finished_reason=length}",
        "vllm:e2e_request_latency_seconds_count",
    ):
        assert after[name] >= before[name], name
    client.completions.create(model=TINY_MODEL, prompt="after the reset", max_tokens=3)
    assert (
        _scrape(app_server.url)["vllm:generation_tokens_total"]
        >= before["vllm:generation_tokens_total"] + 3
    )


def test_every_finished_request_is_counted_once_however_many_finish_between_scrapes(
    make_driver, monkeypatch
):
    monkeypatch.setattr(llm_engine, "MAX_FINISHED_KEPT", 4)  # the snapshot shows only 4
    driver = make_driver()
    params = SamplingParams(max_tokens=3, temperature=0, ignore_eos=True)
    labels = [("engine", "0"), ("model_name", TINY_MODEL)]
    success = "vllm:request_success_total" + str([("engine", "0"), ("finished_reason", "length"),
                                                  ("model_name", TINY_MODEL)])  # fmt: skip
    with TestClient(bare_app(lambda: driver)) as http:

        def scrape() -> dict[str, float]:
            text = http.get("/metrics").text
            return {s.name + str(sorted(s.labels.items())): s.value
                    for f in text_string_to_metric_families(text) for s in f.samples}  # fmt: skip

        assert scrape()[success] == 0  # nothing finished yet: there from the start, as vLLM
        total = 0
        for batch in (13, 9):  # many more than the snapshot keeps finish between two scrapes
            handles = [driver.submit(f"request {total + i}", params) for i in range(batch)]
            for h in handles:
                assert h.result(timeout=60).outputs[0].stop_reason.value == "max_tokens"
            total += batch
            assert sum(r.status == "finished" for r in driver.snapshot().requests) <= 4
            for _ in range(2):  # a second scrape counts nothing twice
                samples = scrape()
                assert samples[success] == total
                for hist in HISTOGRAMS:
                    assert samples[f"{hist}_count" + str(labels)] == total, hist
    driver.stop()
