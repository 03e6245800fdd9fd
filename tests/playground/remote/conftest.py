"""Fixtures of the remote lane's tests: this project's own server (`python app.py`) in a
second process over a tiny random model saved to disk, which can be killed and restarted on
the same port, and a board driver whose lanes are remote."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from engine import EngineConfig
from playground.driver import EngineDriver
from playground.remote.connection import Connection
from playground.remote.engine import RemoteEngine, remote_lanes
from tests.tiny_models import make_tiny_model

ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT_S = 120
SERVER_ARGS = ["--limit-in-flight", "64", "--max-num-seqs", "16", "--max-num-batched-tokens",
               "256", "--limit-max-tokens", "256"]  # fmt: skip


class AppProcess:
    """`python app.py --model DIR` on a fixed 127.0.0.1 port; start() / kill() at will."""

    def __init__(self, model_dir: Path, log_path: Path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.model_dir, self.log_path, self.proc = model_dir, log_path, None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "SPACE_ID"}
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "app.py", "--model", str(self.model_dir), "--port",
                 str(self.port), *SERVER_ARGS],
                cwd=ROOT, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text()[-3000:]
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.25)
        self.proc.kill()
        raise AssertionError("the API server did not answer /health in time")

    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-stream, as a crash would have it."""
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            finally:
                self.proc.kill()


@pytest.fixture(scope="module")
def api_server(tmp_path_factory, default_model):
    """This project's OpenAI-compatible server, in a second process, over a tiny model."""
    model_dir = tmp_path_factory.mktemp("tiny-model")
    make_tiny_model("llama", max_position_embeddings=2048).save_pretrained(model_dir)
    default_model[1].save_pretrained(model_dir)
    server = AppProcess(model_dir, model_dir / "server.log")
    server.start()
    yield server
    server.stop()


def remote_driver(*urls: str, poll_s: float = 0.25) -> EngineDriver:
    """A board driver whose lanes stream to `urls` (two: compare mode)."""
    connections = [Connection(url, poll_s=poll_s) for url in urls]
    config = EngineConfig(num_kv_blocks=512)
    driver = EngineDriver(RemoteEngine(connections[0], config), base_config=config,
                          lanes=remote_lanes(connections))  # fmt: skip
    driver.connections = connections
    return driver


def close(driver: EngineDriver) -> None:
    driver.stop()
    for connection in driver.connections:
        connection.close()
