"""The matmuls of one SmolLM2-135M forward step on each CPU kernel the engine can pick.

A step is 121 matmuls: 30 layers of qkv (576 -> 960), o (576 -> 576), gate+up (576 -> 3072)
and down (1536 -> 576), then the LM head (576 -> 49,152); each has its own random weight, so
the weights come from memory as in a real step. For each number of rows (sequences in a decode
step, tokens in a prefill chunk) the step is timed `--repeat` times per kernel and the median
printed: oneDNN's packed linear (what `torch.ops.mkldnn._linear_pointwise` runs), the engine's
bfloat16 panels (csrc/gemm_bf16.c, on AVX512_BF16) and its AVX2 panels (csrc/gemm.c).

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

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine import linear  # noqa: E402

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


def kernels(dtype: torch.dtype) -> dict:
    """name -> (pack(weight (out, in)) -> packed, run(x, packed, out_features) -> y)."""
    found = {}
    if linear.can_pack(torch.empty(0, dtype=dtype)):

        def onednn_pack(w):
            return torch.ops.mkldnn._reorder_linear_weight(w, linear.PACK_BATCH_HINT)

        def onednn_run(x, packed, n):
            return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")

        found["onednn"] = (onednn_pack, onednn_run)
    if dtype == torch.bfloat16 and linear.panel_gemm_bf16() is not None:

        def bf16_run(x, packed, n):
            y = x.new_empty(x.shape[0], n)
            linear.panel_gemm_bf16()(
                x.shape[0], n, x.shape[1], x.data_ptr(), x.stride(0), packed.data_ptr(),
                None, y.data_ptr(), torch.get_num_threads(),
            )  # fmt: skip
            return y

        found["bf16_panels"] = (linear.pack_bf16_panels, bf16_run)
    if linear.panel_gemm() is not None:

        def panels_run(x, packed, n):
            xf = x.float()
            y = xf.new_empty(x.shape[0], n)
            linear.panel_gemm()(
                int(packed.dtype == torch.bfloat16), x.shape[0], n, x.shape[1], xf.data_ptr(),
                xf.stride(0), packed.data_ptr(), None, None, 0, y.data_ptr(),
                torch.get_num_threads(),
            )  # fmt: skip
            return y

        found["panels"] = (linear.pack_panels, panels_run)
    return found


def time_step(run, packed: list, xs: dict, repeat: int) -> float:
    """Median seconds of the step's matmuls, after one warm-up step."""
    times = []
    for _ in range(repeat + 1):
        start = time.perf_counter()
        for (k, n), w in zip(STEP, packed, strict=True):
            run(xs[k], w, n)
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
    found = {name: (run, [pack(w) for w in weights])
             for name, (pack, run) in kernels(dtype).items()}  # fmt: skip
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
            medians = {name: time_step(run, packed, xs, args.repeat)
                       for name, (run, packed) in found.items()}  # fmt: skip
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
