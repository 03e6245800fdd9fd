"""The e2e fixtures: `python app.py` on a free 127.0.0.1 port (the real default model) and
Debian's chromium driven by Playwright. One server per test module (so a preset one module
starts does not load the next), with the module's SERVER_ARGS if it has them; its log goes to
a file that tests read (`server.log()`), so a chatty server can never block on a full pipe."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip
START_TIMEOUT = 240  # s; a cold first start converts the bundled GGUF (~30 s on 2 cores)
STOP_TIMEOUT = 10  # s; the board stream alone would keep an open page's connection for 20 s
SERVER_ARGS = ["--max-num-seqs", "16", "--limit-in-flight", "32"]  # 16 API streams, one host


class AppServer(str):
    """The server's URL (a str, as page.goto wants it) plus its log and process id."""

    log_path: Path
    pid: int

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory, request):
    port = _free_port()
    args = getattr(request.module, "SERVER_ARGS", SERVER_ARGS)
    if callable(args):  # a module's args that need files of their own (a model directory)
        args = args(tmp_path_factory)
    log_path = tmp_path_factory.mktemp("app") / "server.log"
    env = {k: v for k, v in os.environ.items() if k != "SPACE_ID"}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "app.py", "--port", str(port), *args],
            cwd=ROOT, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = AppServer(f"http://127.0.0.1:{port}")
    url.log_path, url.pid = log_path, proc.pid
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        assert proc.poll() is None, url.log()
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("the app did not answer /health in time")
    yield url
    # Ctrl-C with a page still watching (its board stream open): driver and server stop
    # cleanly, and soon (app.py's SHUTDOWN_GRACE_S), not when the stream would have ended
    with httpx.stream("GET", url + "/board/stream", timeout=60) as watching:
        next(watching.iter_lines())
        proc.send_signal(signal.SIGINT)
        try:
            assert proc.wait(timeout=STOP_TIMEOUT) == 0, url.log()[-3000:]
        finally:
            proc.kill()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def page(server, browser):
    page = browser.new_page(viewport={"width": 1600, "height": 1000})
    page.goto(server)
    yield page
    page.close()
