"""`n` simulated viewers of the board (bench/viewers.py) for `seconds` or until a line comes on
stdin, in a process of their own (a test kills it mid-stream); then prints each viewer's
number of updates as JSON.

    python tests/e2e/crowd.py URL N SECONDS
"""

import asyncio
import json
import os
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from viewers import Crowd, GradioFns  # noqa: E402


async def watch(url: str, n: int, seconds: float) -> None:
    async with httpx.AsyncClient(base_url=url) as http:
        fns = GradioFns.from_config((await http.get("/config")).json(), "stream")
    crowd = Crowd(url, fns, "stream", n)
    await crowd.start()
    print("watching", flush=True)
    line = asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await asyncio.wait([line], timeout=seconds)
    await crowd.stop()
    print(json.dumps([len(v.updates) for v in crowd.viewers]), flush=True)


if __name__ == "__main__":
    asyncio.run(watch(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
    os._exit(0)  # the stdin reader's thread may still wait
