"""The HTTP server around the routes: vllm serve's CORS and request log, and the uvicorn
server that says when it listens."""

import logging
import time

import uvicorn
from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware

log = logging.getLogger("app")


def add_frontend(app: FastAPI, frontend) -> None:
    """vllm serve's CORS (--allowed-origins) and request log (--enable-log-requests)."""
    if frontend.allowed_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(frontend.allowed_origins),
            allow_methods=["*"],
            allow_headers=["*"],
        )
    if frontend.log_requests:

        @app.middleware("http")
        async def log_request(request: Request, call_next):
            started = time.monotonic()
            response = await call_next(request)
            if request.url.path.startswith("/v1/"):
                log.info(
                    "%s %s from %s: %d after %.3f s",
                    request.method,
                    request.url.path,
                    request.client.host if request.client else "?",
                    response.status_code,
                    time.monotonic() - started,
                )
            return response


class ReadyServer(uvicorn.Server):
    """Prints `banner` once the socket listens, so whoever reads it can connect at once."""

    def __init__(self, config: uvicorn.Config, banner: str, started_at: float):
        super().__init__(config)
        self.banner, self.started_at = banner, started_at

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started:
            print(
                f"{self.banner} [{time.monotonic() - self.started_at:.1f} s after start]",
                flush=True,
            )
