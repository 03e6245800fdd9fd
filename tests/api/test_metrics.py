"""GET /metrics: Prometheus text that prometheus_client parses, with counters that move."""

import httpx
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from engine import SamplingParams, llm_engine
from tests.api.server import TINY_MODEL, bare_app

FAMILIES = {  # parsed family name -> type (counters lose their _total)
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prefix_cache_hit_rate": "gauge",
    "vllm:num_preemptions": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
}


def _scrape(url: str) -> dict[str, float]:
    r = httpx.get(url + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    for name, kind in FAMILIES.items():
        assert families[name].type == kind, name
    samples = {}
    for f in families.values():
        for s in f.samples:
            assert s.labels["model_name"] == TINY_MODEL
            extra = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "model_name")
            samples[s.name + (f"{{{extra}}}" if extra else "")] = s.value
    return samples


def test_metrics_parse_and_counters_move(client, app_server):
    before = _scrape(app_server.url)
    r = client.completions.create(model=TINY_MODEL, prompt="metrics please", max_tokens=7)
    after = _scrape(app_server.url)
    assert after["vllm:generation_tokens_total"] >= before["vllm:generation_tokens_total"] + 7
    assert after["vllm:prompt_tokens_total"] > before["vllm:prompt_tokens_total"]
    key = "vllm:request_success_total{finished_reason=max_tokens}"
    assert after[key] >= before.get(key, 0) + 1
    for hist in ("time_to_first_token_seconds", "e2e_request_latency_seconds",
                 "time_per_output_token_seconds"):  # fmt: skip
        count = f"vllm:{hist}_count"
        assert after[count] >= before[count] + 1
        assert after[f"vllm:{hist}_bucket{{le=+Inf}}"] == after[count]
    assert 0 <= after["vllm:kv_cache_usage_perc"] <= 1
    assert r.usage.completion_tokens == 7


def test_counters_survive_a_board_reset(client, app_server):
    client.completions.create(model=TINY_MODEL, prompt="before the reset", max_tokens=3)
    before = _scrape(app_server.url)
    app_server.driver.reset()  # a fresh engine: its own totals restart at zero
    after = _scrape(app_server.url)
    for name in (
        "vllm:generation_tokens_total",
        "vllm:request_success_total{finished_reason=max_tokens}",
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
    labels = [("model_name", TINY_MODEL)]
    success = "vllm:request_success_total" + str([("finished_reason", "max_tokens"), *labels])
    with TestClient(bare_app(lambda: driver)) as http:

        def scrape() -> dict[str, float]:
            text = http.get("/metrics").text
            return {s.name + str(sorted(s.labels.items())): s.value
                    for f in text_string_to_metric_families(text) for s in f.samples}  # fmt: skip

        assert success not in scrape()  # nothing finished yet
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
                for hist in ("time_to_first_token_seconds", "time_per_output_token_seconds",
                             "e2e_request_latency_seconds"):  # fmt: skip
                    assert samples[f"vllm:{hist}_count" + str(labels)] == total, hist
    driver.stop()
