"""A client that closes its stream early: the request ends CANCELLED and frees its KV blocks."""

import httpx
import pytest

from tests.api.server import TINY_MODEL, wait_for


def test_closing_a_stream_cancels_the_request(client, app_server):
    driver = app_server.driver
    driver.set_pace(40)  # slow motion, so the stream is still going when we leave
    try:
        stream = client.chat.completions.create(
            model=TINY_MODEL, messages=[{"role": "user", "content": "Talk for a long time."}],
            max_tokens=400, temperature=0, stream=True,
        )  # fmt: skip
        it = iter(stream)
        chunks = [next(it), next(it)]
        stream.close()  # drops the connection mid-stream
        rid = chunks[0].id

        def record():
            return next((r for r in driver.state().records if r.request_id == rid), None)

        wait_for(lambda: record() is not None and record().finished, timeout=10)
        assert record().stop_reason == "cancelled" and record().num_output_tokens < 400
    finally:
        driver.set_pace("max")
    snap = wait_for(lambda: (s := driver.snapshot()).num_running + s.num_waiting == 0 and s)
    assert snap.kv_blocks_used == 0  # its blocks went back (only evictable cache remains)
    state = next(r for r in snap.requests if r.request_id == rid)
    assert state.status == "finished" and state.stop_reason == "cancelled"
    assert state.block_table == ()


def test_a_non_streamed_client_that_leaves_cancels_too(app_server):
    driver = app_server.driver
    driver.set_pace(40)
    try:
        body = {"model": TINY_MODEL, "prompt": "Go on and on", "max_tokens": 400}
        with pytest.raises(httpx.TimeoutException):  # the client gives up and leaves
            httpx.post(app_server.url + "/v1/completions", json=body, timeout=0.5)
        rec = wait_for(
            lambda: next((r for r in driver.state().records
                          if r.prompt == "Go on and on" and r.finished), None), timeout=10,
        )  # fmt: skip
        assert rec.stop_reason == "cancelled" and rec.owner.startswith("api:")
    finally:
        driver.set_pace("max")
