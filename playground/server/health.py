"""GET /health, vLLM's probe, with the driver's counts; /healthz, its older name, answers the
same (kept for probes that use it, left out of the OpenAPI document)."""

from collections.abc import Callable

from fastapi import FastAPI

from playground.driver import EngineDriver
from playground.server.openai_protocol import not_ready
from playground.server.openapi import HEALTH_RESPONSES, Health


def add_health_routes(app: FastAPI, get_driver: Callable[[], EngineDriver | None]) -> None:
    """200 with the driver's counts while it runs; 503 (OpenAI's error shape) before it
    starts and once it stopped."""

    def health():  # Health, or the 503 response
        d = get_driver()
        if d is None or not d.is_alive:
            return not_ready().response()
        snap = d.snapshot()
        return Health(
            status="ok",
            step=snap.step,
            waiting=snap.num_waiting,
            running=snap.num_running,
            generated_tokens=snap.totals.num_generated_tokens,
            tokens_per_s=round(snap.totals.tokens_per_s, 2),
        )

    app.add_api_route(
        "/health", health, methods=["GET"], response_model=Health,
        responses=HEALTH_RESPONSES, tags=["health"],
    )  # fmt: skip
    app.add_api_route(
        "/healthz", health, methods=["GET"], response_model=Health, include_in_schema=False
    )
