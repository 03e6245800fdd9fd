"""The HTTP server around the routes (playground/server/frontend.py): its connections keep a
fixed send buffer and are reset once their data stalls."""

import socket
import threading
import time

import uvicorn
from fastapi import FastAPI

from playground.server.frontend import (
    SEND_BUFFER_BYTES,
    STALLED_AFTER_S,
    ReadyServer,
    bound_connections,
)
from tests.api.server import wait_for


def _options(sock: socket.socket) -> tuple[int, int]:
    """(send buffer, TCP user timeout in ms); Linux doubles the buffer it is asked for."""
    return (sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT))  # fmt: skip


def test_every_connection_a_bounded_socket_accepts_keeps_its_bounds():
    with socket.socket() as listener:
        bound_connections(listener, stalled_after_s=3.0)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with socket.create_connection(listener.getsockname()):
            accepted, _ = listener.accept()
            with accepted:
                assert _options(accepted) == (2 * SEND_BUFFER_BYTES, 3000)


def test_the_app_server_bounds_the_sockets_it_listens_on():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(FastAPI(), host="127.0.0.1", port=port, log_level="warning")
    server = ReadyServer(config, "ready", time.monotonic())
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=30)
        (listener,) = [sock for srv in server.servers for sock in srv.sockets]
        assert _options(listener) == (2 * SEND_BUFFER_BYTES, int(STALLED_AFTER_S * 1000))
    finally:
        server.should_exit = True
        thread.join(10)
