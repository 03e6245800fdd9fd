"""HTTP API test helpers: a uvicorn server in a thread, an openai client, a board page's
session, small waits."""

import socket
import threading
import time

import httpx
import uvicorn
from fastapi import FastAPI

from playground.server.api import register_api
from playground.server.frontend import bound_connections

TINY_MODEL = "tiny-llama"  # the id the tiny server serves


class Server:
    """uvicorn serving `app` on a free 127.0.0.1 port, in a daemon thread."""

    def __init__(self, app, stalled_after_s: float | None = None, **config):
        """`config`: more uvicorn.Config settings (proxy_headers, ...); `stalled_after_s`: the
        connections bounded as the app's are (bound_connections), reset after that long."""
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        if stalled_after_s is not None:
            bound_connections(self.sock, stalled_after_s)
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


class Page:
    """One browser session of the board, spoken to as its page does (POST /run/predict with
    the session's hash and the event's fn_index)."""

    def __init__(self, url: str, session: str):
        self.url, self.session = url, session
        self.banner = self.role = ""  # the seat banner and role key as the page shows them
        self.slider = 1  # the rewind slider's value as the page shows it (its first value)
        deps = httpx.get(url + "/config", timeout=10).json()["dependencies"]
        self.fns = {d["api_name"]: d["id"] for d in deps}

    def call(self, name: str, *data) -> httpx.Response:
        body = {"fn_index": self.fns[name], "data": list(data), "session_hash": self.session}
        return httpx.post(self.url + "/gradio_api/run/predict", json=body, timeout=30)

    def load(self):
        self._refresh("arrive")
        return self

    def tick(self) -> str:
        """The seat banner this session is shown, after one tick."""
        self._refresh("tick")
        return self.banner

    def _refresh(self, name: str) -> None:
        # [seen, rid, every, role, banner, rewound, slider]: live, nothing inspected
        r = self.call(name, -1, None, 0.25, self.role, self.banner, None, self.slider)
        assert r.status_code == 200, r.text
        slider, banner, role = r.json()["data"][-3:]  # TickOutputs: values, or updates (skip)
        self.slider = slider.get("value", self.slider) if isinstance(slider, dict) else self.slider
        self.banner = banner if isinstance(banner, str) else self.banner
        self.role = role if isinstance(role, str) else self.role

    def leave(self):
        return self.call("leave")
