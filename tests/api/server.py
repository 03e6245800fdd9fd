"""HTTP API test helpers: a uvicorn server in a thread, an openai client, small waits."""

import socket
import threading
import time

import uvicorn
from fastapi import FastAPI

from playground.api import register_api

TINY_MODEL = "tiny-llama"  # the id the tiny server serves


class Server:
    """uvicorn serving `app` on a free 127.0.0.1 port, in a daemon thread."""

    def __init__(self, app, **config):
        """`config`: more uvicorn.Config settings (proxy_headers, ...)."""
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2, **config)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "no server"
            time.sleep(0.02)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


def openai_client(url: str, **kw):
    import openai

    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60, **kw)


def bare_app(get_driver, **kw) -> FastAPI:
    """A FastAPI app with only the API routes (for the 429 / 503 cases); `kw` for register_api."""
    app = FastAPI()
    register_api(app, get_driver, **{"model_name": TINY_MODEL, **kw})
    return app


def wait_for(predicate, timeout: float = 20.0, every: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("condition not met in time")
