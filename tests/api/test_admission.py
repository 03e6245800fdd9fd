"""vLLM's admission limit, --max-num-queued-reqs: no limit by default
(vllm/config/scheduler.py), a bounded one on a public server; past it, vLLM's 503 and its
`vllm:admission_rejections` counter."""

from dataclasses import replace

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

import app as app_module
from engine import SamplingParams
from playground.access.limits import (
    PUBLIC_MAX_NUM_QUEUED_REQS,
    QUEUE_OVERFLOW_MESSAGE,
    PublicLimits,
)
from playground.cli.startup import engine_config, public_limits
from tests.api.server import TINY_MODEL, bare_app, wait_for

LONG = SamplingParams(max_tokens=50, ignore_eos=True)


def _rejections(http) -> dict[str, float]:
    text = http.get("/metrics").text
    [fam] = [f for f in text_string_to_metric_families(text)
             if f.name == "vllm:admission_rejections"]  # fmt: skip
    assert all(s.labels.keys() == {"model_name", "reason"} for s in fam.samples)
    return {s.labels["reason"]: s.value for s in fam.samples}


def test_no_limit_locally_a_bounded_one_on_a_public_server(monkeypatch):
    """vllm/config/scheduler.py: max_num_queued_reqs defaults to None (no limit), and vLLM's
    engine has no waiting-queue limit of its own; --max-num-queued-reqs sets it (ge=0)."""
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert PublicLimits().max_num_queued_reqs is None
    assert public_limits(app_module.parse_args([])).max_num_queued_reqs is None
    assert engine_config(app_module.parse_args([])).max_waiting is None
    public = public_limits(app_module.parse_args(["--public"]))
    assert public.max_num_queued_reqs == PUBLIC_MAX_NUM_QUEUED_REQS
    given = public_limits(app_module.parse_args(["--public", "--max-num-queued-reqs", "0"]))
    assert given.max_num_queued_reqs == 0


def test_admission_counts_waiting_and_running_sequences_and_answers_vllms_503(make_driver):
    """vllm/v1/engine/async_llm.py check_admission: refused when the unfinished requests
    (waiting + running) plus the request's n would pass max_num_queued_reqs; its
    QueueOverflowError (vllm/exceptions.py) is answered by create_error_response
    (vllm/entrypoints/serve/exception_handling/error_response.py): 503, its message, no
    param; vllm/v1/metrics/loggers.py counts it in
    vllm:admission_rejections{reason="max_num_queued_reqs"}, every reason from 0."""
    driver = make_driver()
    driver.limits = replace(driver.limits, max_num_queued_reqs=3)
    body = {"model": TINY_MODEL, "prompt": "one more", "max_tokens": 2}
    with TestClient(bare_app(lambda: driver)) as http:
        assert _rejections(http) == {"max_num_queued_reqs": 0, "max_num_queued_tokens": 0}
        driver.pause()
        driver.submit("running", LONG, wait=True)
        driver.step_once()  # its prefill ran: it is running now
        driver.submit("waiting", LONG, wait=True)
        wait_for(lambda: (driver.snapshot().num_running, driver.snapshot().num_waiting) == (1, 1))
        r = http.post("/v1/completions", json={**body, "n": 2})  # 2 + 2 > 3
        assert r.status_code == 503, r.text
        assert r.json()["error"]["message"] == QUEUE_OVERFLOW_MESSAGE
        assert r.json()["error"]["param"] is None
        driver.submit("fits", LONG, max_num_queued_reqs=3, wait=True)  # 2 + 1 = 3
        assert http.post("/v1/completions", json=body).status_code == 503  # 3 + 1 > 3
        assert _rejections(http) == {"max_num_queued_reqs": 2, "max_num_queued_tokens": 0}
        driver.resume()
    driver.stop()
