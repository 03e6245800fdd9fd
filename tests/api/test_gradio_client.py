"""`gradio_client` drives the board's named API endpoints and gets the generated text."""

import re

import pytest
from gradio_client import Client

from tests.api.server import wait_for

GENERATE_ENDPOINT = "/generate"  # expected: prompt (+ max_tokens, ...) in, generated text out


@pytest.fixture(scope="module")
def gradio(app_server):
    return Client(app_server.url + "/", verbose=False)


def test_submit_prompt_endpoint_joins_the_batch(gradio, app_server):
    # inputs of BoardCallbacks.submit_prompt (playground/ui/callbacks.py): text, max_tokens,
    # temperature, top_p, top_k, seed, stop strings, logprobs
    cleared, status = gradio.predict(
        "Say hello", 6, 0.0, 1.0, 0, -1, "", False, api_name="/submit_prompt"
    )
    assert cleared == "", status
    rid = re.search(r"\*\*(\S+)\*\*", status).group(1)
    record = wait_for(
        lambda: next((r for r in app_server.driver.state().records
                      if r.request_id == rid and r.finished), None), timeout=30,
    )  # fmt: skip
    assert record.owner.startswith("visitor:") and record.num_output_tokens == 6 and record.text


def test_generate_endpoint_returns_the_text(gradio):
    endpoints = gradio.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert GENERATE_ENDPOINT in endpoints, list(endpoints)
    text = gradio.predict("Say hello", api_name=GENERATE_ENDPOINT)
    assert isinstance(text, str) and text
