"""The OpenAPI document against the server: schemathesis, every check, positive and negative
cases, on the real app (board + /v1 + /health + /metrics) over the tiny model.

It must find no server error, no response that contradicts the document (status, content
type, body schema) and no schema-valid request rejected nor schema-invalid one accepted.
`make test-api-fuzz` runs more cases (API_FUZZ_EXAMPLES).
"""

import os
import re
import subprocess
import sys

import httpx
import jsonschema_rs
import pytest

from engine import EngineConfig
from playground.access.limits import PublicLimits
from playground.driver import EngineDriver
from tests.api.conftest import SERVER_ENGINE
from tests.api.server import Server
from tests.tiny_models import make_engine, make_tiny_model

EXAMPLES = int(os.environ.get("API_FUZZ_EXAMPLES", "15"))  # per operation and phase
PATHS = r"^/(v1/|health|metrics|tokenize|detokenize|version)"  # not the board's own Gradio routes


@pytest.fixture(scope="module")
def fuzz_server(tiny_model):
    """The app over a tiny model with an 8192-token context and KV room for it: a JSON schema
    cannot count tokens, so the prompt-token limit (documented with the 400) sits where no
    generated prompt reaches it; max_tokens (8) and n are in the document."""
    import app as app_module

    model, tokenizer = make_tiny_model("llama", max_position_embeddings=8192), tiny_model[1]
    config = EngineConfig(**{**SERVER_ENGINE, "num_kv_blocks": 600})
    driver = EngineDriver(make_engine(model, tokenizer, config), base_config=config)
    driver.limits = PublicLimits(max_prompt_tokens=8000, max_tokens=8, max_in_flight=64)
    server = Server(app_module.create_app(driver))
    yield server
    server.stop()
    driver.stop()


def test_the_openapi_document_declares_bodies_errors_and_the_metrics_text(fuzz_server):
    spec = httpx.get(fuzz_server.url + "/openapi.json").json()
    chat = spec["paths"]["/v1/chat/completions"]["post"]
    body = chat["requestBody"]["content"]["application/json"]["schema"]
    assert chat["requestBody"]["required"] and body["required"] == ["messages"]
    assert body["additionalProperties"] is True  # unknown fields ignored, as vLLM ignores them
    assert body["properties"]["max_tokens"]["anyOf"][0]["maximum"] == 8  # the server's limit
    assert {"400", "401", "404", "429", "503"} <= set(chat["responses"])
    assert set(chat["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    assert set(spec["paths"]["/metrics"]["get"]["responses"]["200"]["content"]) == {"text/plain"}
    assert "503" in spec["paths"]["/health"]["get"]["responses"]
    completions = spec["paths"]["/v1/completions"]["post"]["requestBody"]["content"]
    best_of = completions["application/json"]["schema"]["properties"]["best_of"]["anyOf"][0]
    assert best_of["maximum"] == 4  # beams count against the server's --limit-n
    tokenize = spec["paths"]["/tokenize"]["post"]
    text, chat = tokenize["requestBody"]["content"]["application/json"]["schema"]["anyOf"]
    assert text["required"] == ["prompt"] and chat["required"] == ["messages"]
    assert tokenize["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/TokenizeResponse"
    )
    detokenize = spec["paths"]["/detokenize"]["post"]["requestBody"]["content"]
    tokens = detokenize["application/json"]["schema"]["properties"]["tokens"]
    assert tokens["items"]["maximum"] == 49151  # the vocabulary's last id


def test_the_fuzzers_beam_search_case_is_refused_by_the_document_and_the_server(fuzz_server):
    """A case schemathesis found: use_beam_search with n null and no best_of. The document
    (playground/server/openapi.py, _beam_search_rules) calls it invalid and the server answers
    400 (CompletionRequest.check: at least 2 beams); checked here as the fuzzer checks it, the
    body against the document's schema. vLLM 0.32 would run it as a beam search of width 1
    (to_beam_search_params, vllm/entrypoints/openai/completion/protocol.py: n null is 1)."""
    spec = httpx.get(fuzz_server.url + "/openapi.json").json()
    op = spec["paths"]["/v1/completions"]["post"]
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    valid = jsonschema_rs.validator_for({**schema, "components": spec["components"]}).is_valid
    case = {"prompt": "0", "n": None, "stream": True, "use_beam_search": True}
    assert not valid(case)
    r = httpx.post(fuzz_server.url + "/v1/completions", json=case, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "best_of", r.text
    two = {**case, "n": 2, "max_tokens": 2}  # two beams: valid to both
    assert valid(two)
    assert httpx.post(fuzz_server.url + "/v1/completions", json=two, timeout=60).status_code == 200


@pytest.mark.timeout(1200)  # about a minute alone on 2 cores; much more on a crowded machine
def test_schemathesis_finds_nothing(fuzz_server, tmp_path):
    cmd = [sys.executable, "-m", "schemathesis.cli", "run", fuzz_server.url + "/openapi.json",
           "--checks", "all", "--mode", "all", "--phases", "examples,coverage,fuzzing",
           "--max-examples", str(EXAMPLES), "--include-path-regex", PATHS, "--workers", "1",
           "--generation-deterministic", "--request-timeout", "60", "--no-color",
           "--continue-on-failure"]  # fmt: skip
    # in tmp_path: schemathesis keeps a cache in its working directory
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=1100, cwd=tmp_path)
    report = run.stdout[-12000:] + run.stderr[-3000:]
    assert run.returncode == 0, report
    cases = re.search(r"(\d+) generated, (\d+) passed", run.stdout)
    assert cases and int(cases[1]) == int(cases[2]) >= 200, report  # a few hundred, all passed
