"""The matmuls of one SmolLM2-135M forward step on each CPU kernel the engine can pick.

A step is 121 matmuls: 30 layers of qkv (576 -> 960), o (576 -> 576), gate+up (576 -> 3072)
and down (1536 -> 576), then the LM head (576 -> 49,152); each has its own random weight, so
the weights come from memory as in a real step. For each number of rows (sequences in a decode
step, tokens in a prefill chunk) the step is timed `--repeat` times per kernel and the median
printed: each through `FusedLinear` as the engine calls it, on oneDNN's packed linear, the
engine's bfloat16 panels (csrc/gemm_bf16.c, on AVX512_BF16) and its float32-sum panels
(csrc/gemm.c, AVX-512 or AVX2).

`--busy BURN_US,SLEEP_US` runs a second process meanwhile that burns BURN_US of CPU, sleeps
SLEEP_US, and again: what a server's event loop and a client on the same machine take from the
forward. A kernel that splits its work in fixed shares waits for the thread that lost its core.

    python bench/bench_matmuls.py --dtype bfloat16 --rows 1,16,64,512
    python bench/bench_matmuls.py --dtype bfloat16 --rows 64 --busy 240,1000
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.cpu import linear  # noqa: E402
from engine.cpu.linear import FusedLinear  # noqa: E402

HIDDEN, INTERMEDIATE, QKV, VOCAB, LAYERS = 576, 1536, 960, 49152, 30
SHAPES = [(HIDDEN, QKV), (HIDDEN, HIDDEN), (HIDDEN, 2 * INTERMEDIATE), (INTERMEDIATE, HIDDEN)]
STEP = SHAPES * LAYERS + [(HIDDEN, VOCAB)]  # (in, out) of each matmul, in order
BUSY_LOOP = """
import sys, time
burn, pause = float(sys.argv[1]) / 1e6, float(sys.argv[2]) / 1e6
while True:
    start = time.perf_counter()
    while time.perf_counter() - start < burn:
        pass
    time.sleep(pause)
"""


def kernels(dtype: torch.dtype) -> list[str]:
    """The FusedLinear backends besides F.linear that this machine can run for `dtype`."""
    found = []
    if linear.can_pack(torch.empty(0, dtype=dtype)):
        found.append("onednn")
    if dtype == torch.bfloat16 and linear.panel_gemm_bf16() is not None:
        found.append("bf16_panels")
    if linear.panel_gemm() is not None:
        found.append("panels")
    return found


def fused(weight: torch.Tensor, kernel: str) -> FusedLinear:
    """`weight` (out, in) packed and run as the engine does on `kernel`, whichever this CPU
    would pick. (transformers' (out, in) layout: no one-row GEMV, so one row times `kernel`.)"""
    module = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False, dtype=weight.dtype)
    with torch.no_grad():
        module.weight.copy_(weight)
    with mock.patch.object(linear, "backend", lambda w, dtype=None: kernel):
        return FusedLinear([module])


def time_step(step: list[FusedLinear], xs: dict, repeat: int) -> float:
    """Median seconds of the step's matmuls, after one warm-up step."""
    times = []
    for _ in range(repeat + 1):
        start = time.perf_counter()
        for (k, _n), matmul in zip(STEP, step, strict=True):
            matmul(xs[k])
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    parser.add_argument("--rows", default="1,2,4,8,16,32,64,128,512")
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--busy", default=None, metavar="BURN_US,SLEEP_US")
    parser.add_argument("--json", default=None, help="also write the medians here")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    rows = [int(r) for r in args.rows.split(",")]
    torch.manual_seed(0)
    weights = [torch.randn(n, k, dtype=dtype) * k**-0.5 for k, n in STEP]
    found = {name: [fused(w, name) for w in weights] for name in kernels(dtype)}
    busy = None
    if args.busy:
        burn, pause = args.busy.split(",")
        busy = subprocess.Popen([sys.executable, "-c", BUSY_LOOP, burn, pause])
    results = {}
    try:
        print(f"{args.dtype}, {torch.get_num_threads()} threads, busy: {args.busy or 'no'}")
        print("rows  " + "  ".join(f"{name:>12}" for name in found))
        for m in rows:
            xs = {k: torch.randn(m, k, dtype=dtype) for k in (HIDDEN, INTERMEDIATE)}
            medians = {name: time_step(step, xs, args.repeat) for name, step in found.items()}
            results[m] = {name: round(s * 1e3, 2) for name, s in medians.items()}
            print(f"{m:>4}  " + "  ".join(f"{s * 1e3:>9.1f} ms" for s in medians.values()))
    finally:
        if busy is not None:
            busy.kill()
    if args.json:
        meta = {"dtype": args.dtype, "busy": args.busy, "threads": torch.get_num_threads()}
        Path(args.json).write_text(json.dumps({**meta, "ms": results}, indent=1))


if __name__ == "__main__":
    main()
