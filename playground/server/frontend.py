"""The HTTP server around the routes: vllm serve's CORS and request log, and the uvicorn
server that says when it listens and bounds what a reader that stops reading can hold."""

import logging
import socket
import time

import uvicorn
from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware

log = logging.getLogger("app")

# A connection's send buffer (Linux doubles it), fixed: the kernel would grow it up to
# tcp_wmem's max (megabytes) for a reader that stops reading, and the writes would not block
SEND_BUFFER_BYTES = 128 * 1024
STALLED_AFTER_S = 20.0  # a connection whose sent data cannot move for this long is reset


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


def bound_connections(sock, stalled_after_s: float = STALLED_AFTER_S) -> None:
    """Every connection the listening socket `sock` accepts from now on keeps a fixed send
    buffer and is reset once its sent data has not moved for `stalled_after_s` (TCP's user
    timeout; a recent Linux counts a zero window too). So the writes to a reader that stopped
    reading block within a few frames, the board's fan-out drops it (board_stream.py), and its
    connection goes too, instead of the kernel buffering megabytes for it for as long as its
    peer answers."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
    if hasattr(socket, "TCP_USER_TIMEOUT"):  # Linux
        milliseconds = int(stalled_after_s * 1000)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, milliseconds)


class ReadyServer(uvicorn.Server):
    """Prints `banner` once the socket listens, so whoever reads it can connect at once; its
    connections are bounded (bound_connections)."""

    def __init__(self, config: uvicorn.Config, banner: str, started_at: float):
        super().__init__(config)
        self.banner, self.started_at = banner, started_at

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        for server in self.servers:  # before the loop accepts a connection
            for sock in server.sockets:
                bound_connections(sock)
        if self.started:
            print(
                f"{self.banner} [{time.monotonic() - self.started_at:.1f} s after start]",
                flush=True,
            )
