"""The streamed answer on the wire: server-sent events `data: <json>`, `data: [DONE]` last;
a failure mid-stream sends an OpenAI-shaped error event and still ends with [DONE]."""

import json

import httpx
import pytest

from playground.server.responses import ResponseTracker
from tests.api.server import TINY_MODEL, wait_for

HI = [{"role": "user", "content": "Tell me a story."}]
ROUTES = [  # (path, body, the stream's "object")
    ("/v1/completions", {"prompt": "Once upon a time"}, "text_completion"),
    ("/v1/chat/completions", {"messages": HI}, "chat.completion.chunk"),
]


def sse_events(url: str, path: str, body: dict) -> tuple[httpx.Response, list[str]]:
    """The raw events of one streamed request: the text of each `\\n\\n`-ended event."""
    with httpx.stream("POST", url + path, json=body, timeout=60) as r:
        raw = "".join(r.iter_text())
    assert raw.endswith("\n\n"), raw[-200:]
    return r, raw.removesuffix("\n\n").split("\n\n")


def parse_data(events: list[str]) -> list[dict]:
    """Every event is exactly one `data: <json>` line, the last one `data: [DONE]`."""
    assert events[-1] == "data: [DONE]", events[-3:]
    parsed = []
    for event in events[:-1]:
        assert "\n" not in event and event.startswith("data: "), repr(event)
        parsed.append(json.loads(event.removeprefix("data: ")))
    return parsed


@pytest.mark.parametrize("path,body,obj", ROUTES)
def test_stream_is_data_lines_ending_with_done(app_server, path, body, obj):
    body = {"model": TINY_MODEL, **body, "max_tokens": 6, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    r, events = sse_events(app_server.url, path, body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    chunks = parse_data(events)
    assert len(chunks) >= 3  # a few tokens and the usage chunk
    assert {c["object"] for c in chunks} == {obj} and len({c["id"] for c in chunks}) == 1
    *tokens, usage = chunks
    assert tokens[-1]["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 6


@pytest.mark.parametrize("path,body,obj", ROUTES)
def test_a_failure_mid_stream_sends_an_error_event_then_done(
    app_server, monkeypatch, path, body, obj
):
    calls, chunks_of = [], ResponseTracker.chunks

    def flaky_chunks(self, out):  # the third output's delta conversion raises
        calls.append(out.request_id)
        if len(calls) == 3:
            raise RuntimeError("delta conversion broke")
        return chunks_of(self, out)

    monkeypatch.setattr(ResponseTracker, "chunks", flaky_chunks)
    driver = app_server.driver
    driver.set_pace(40)  # slow motion: the request is still running when the stream fails
    try:
        body = {"model": TINY_MODEL, **body, "max_tokens": 400, "ignore_eos": True,
                "stream": True}  # fmt: skip
        r, events = sse_events(app_server.url, path, body)
    finally:
        driver.set_pace("max")
    assert r.status_code == 200
    *good, last = parse_data(events)
    assert good and all(c["object"] == obj for c in good)
    error = last["error"]
    assert set(last) == {"error"} and set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "server_error" and "delta conversion broke" in error["message"]
    rid = calls[0]

    def record():
        return next((x for x in driver.state().records if x.request_id == rid), None)

    wait_for(lambda: record() is not None and record().finished, timeout=10)
    assert record().stop_reason in ("cancelled", "error")
    assert record().num_output_tokens < 400
