#!/usr/bin/env bash
# The GPU check, one command from the repository root on a CUDA machine:
#
#     bench/gpu_check.sh
#
# Needs python3 with a CUDA build of torch (2.11 or later), transformers (5.17 or later),
# tokenizers, pytest and pytest-timeout. No weights, no downloads, nothing carried: the models
# are random-weight ones built from committed configs (bench/random_models.py) and prompts
# are random token ids, decoded by a word-level tokenizer of the model's vocabulary size.
#
# Parts and time boxes (8 minutes in all on one H200):
#   1. environment: GPU, torch, transformers                                    (seconds)
#   2. correctness, `pytest -m cuda` (tests/engine/test_cuda.py): greedy equality with
#      transformers `generate` on CUDA in fp32 (DESIGN.md's criterion) and in bf16 (the
#      README's bf16 criterion, SmolLM2-135M's and a ~1B Llama's shapes), chunked prefill +
#      prefix caching + preemption, from_pretrained's device and dtype         (box 180 s)
#   3. throughput, bf16 (bench/gpu_check.py): the engine, transformers static batches and
#      generate_batch at 1 / 16 / 64 / 256 concurrent requests, batch-1 ms/token;
#      no row starts after 240 s                                                (box 270 s)
#
# Writes to $OUT (else bench/out): env.txt, pytest.log, bench.log, gpu_check.json and
# gpu_check.md (the table, rewritten after every row). Exit status: non-zero when a part failed.
#
# Arguments go on to bench/gpu_check.py (e.g. `--models smollm2-135m --budget-s 120`; keep
# --budget-s under 270 s). DEVICE=cpu bench/gpu_check.sh: a dry run of every part on the CPU
# with a 2-layer model and small sizes (under a minute on 2 idle cores). PYTHON=... picks the
# interpreter.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/out}
PYTHON=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"

if [ "$DEVICE" = cpu ]; then
    BENCH_ARGS=(--device cpu --dtype float32 --models tiny --concurrency 1,4,16
                --prompt-len 8,48 --max-tokens 4,16)
else
    BENCH_ARGS=(--device "$DEVICE")
fi

{
    date -u
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version \
        --format=csv
    "$PYTHON" -c 'import sys, torch, transformers, tokenizers
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available(), "transformers", transformers.__version__,
      "tokenizers", tokenizers.__version__)'
} 2>&1 | tee "$OUT/env.txt"

status=0
part() {  # part NAME BOX_S LOG COMMAND...: run COMMAND under a time box, log it, note a failure
    local name=$1 box=$2 log=$3
    shift 3
    echo "== $name (box $box s)"
    timeout "$box" "$@" 2>&1 | tee "$OUT/$log"
    local rc=${PIPESTATUS[0]}
    if [ "$rc" != 0 ]; then
        echo "== $name: exit status $rc$([ "$rc" = 124 ] && echo ', past its time box')"
        status=1
    fi
}

part "correctness: pytest -m cuda" 180 pytest.log env CUDA_TESTS_DEVICE="$DEVICE" \
    "$PYTHON" -m pytest -m cuda -q -rA -s -p no:cacheprovider tests/engine/test_cuda.py
part "throughput: bench/gpu_check.py" 270 bench.log \
    "$PYTHON" bench/gpu_check.py --out "$OUT" --budget-s 240 "${BENCH_ARGS[@]}" "$@"

echo "== done (status $status): $OUT"
exit $status
