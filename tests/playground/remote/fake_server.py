"""A fake OpenAI-compatible server for the remote lane's tests: canned streams whose last
user message picks a behaviour ("drop": the stream breaks after one chunk, "slow": it stalls
after one), a /metrics that can fail or stall, and a key check."""

import asyncio
import json
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

PIECES = ("Hel", "lo", " there")


@dataclass
class FakeState:
    api_key: str | None = None
    metrics_status: int = 200
    metrics_delay_s: float = 0.0
    running: int = 0
    seen: list = field(default_factory=list)  # (body, Authorization header) per request


def _chunk(**choice) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, **choice}]}) + "\n\n"


def fake_app(state: FakeState) -> FastAPI:
    app = FastAPI()

    @app.get("/metrics")
    async def metrics():
        await asyncio.sleep(state.metrics_delay_s)
        text = f'vllm:num_requests_running{{model_name="fake"}} {state.running}\n'
        return PlainTextResponse(text, status_code=state.metrics_status)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "fake", "object": "model"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        auth = request.headers.get("authorization")
        state.seen.append((body, auth))
        if state.api_key and auth != f"Bearer {state.api_key}":
            return JSONResponse({"error": {"message": "invalid api key"}}, status_code=401)
        behaviour = body["messages"][-1]["content"]

        async def stream():
            yield _chunk(delta={"role": "assistant", "content": ""}, finish_reason=None)
            for piece in PIECES:
                yield _chunk(delta={"content": piece}, finish_reason=None)
                if behaviour == "drop":
                    raise RuntimeError("the fake server drops this stream")
                if behaviour == "slow":
                    await asyncio.sleep(60)
            yield _chunk(delta={}, finish_reason="stop", stop_reason=None)
            usage = {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}
            yield "data: " + json.dumps({"choices": [], "usage": usage}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return app
