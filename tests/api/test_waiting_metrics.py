"""`num_requests_waiting_by_reason{reason}`: the waiting queue split by why it waits, in
vLLM's two values and in the engine's own."""

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from engine import SamplingParams, WaitingReason
from tests.api.server import TINY_MODEL, bare_app


def test_waiting_requests_are_exported_by_reason(make_driver):
    driver = make_driver(max_num_seqs=2, max_num_batched_tokens=64)
    driver.pause()
    params = SamplingParams(max_tokens=40, temperature=0, ignore_eos=True)
    handles = [driver.submit(f"request number {i}", params, wait=True) for i in range(5)]
    with TestClient(bare_app(lambda: driver)) as http:

        def by_reason(prefix: str) -> dict[str, float]:
            text = http.get("/metrics").text
            families = {f.name: f for f in text_string_to_metric_families(text)}
            fam = families[f"{prefix}:num_requests_waiting_by_reason"]
            assert fam.type == "gauge"
            assert all(s.labels["model_name"] == TINY_MODEL for s in fam.samples)
            return {s.labels["reason"]: s.value for s in fam.samples}

        assert set(by_reason("cb_playground")) == {r.value for r in WaitingReason}
        assert by_reason("vllm") == {"capacity": 0, "deferred": 0}  # no step looked at them yet
        assert sum(by_reason("cb_playground").values()) == 0
        driver.step_once()  # two admitted, three held back by max_num_seqs
        counts = by_reason("cb_playground")
        assert counts["max_num_seqs"] == 3 and sum(counts.values()) == 3
        assert by_reason("vllm") == {"capacity": 3, "deferred": 0}
        assert driver.snapshot().num_waiting == 3
    for h in handles:
        driver.abort(h.request_id)
    driver.resume()
